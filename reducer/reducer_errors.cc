#include "reducer/reducer_errors.h"

#include <algorithm>

#include "autograd/base/error.h"

namespace ddpkit::reducer {
namespace {

std::string Describe(const ParamRef& p) {
  return StrCat("parameter ", p.index, " ('", p.name, "')");
}

}  // namespace

std::string WithPyTorchPhrase(std::string message,
                              std::initializer_list<std::string_view> phrases) {
  std::string tail = " (PyTorch: ";
  std::string_view separator;
  for (std::string_view phrase : phrases) {
    StrAppend(&tail, separator, "\"", phrase, "\"");
    separator = "; ";
  }
  tail += ")";
  const size_t line_end = std::min(message.find('\n'), message.size());
  message.insert(line_end, tail);
  return message;
}

std::string MarkedTwiceMessage(int rank, const ParamRef& param) {
  return WithPyTorchPhrase(
      StrCat(
          "[ddp] rank ", rank, ": ", Describe(param),
          " was marked ready twice in one backward pass: its gradient hook fired again after its "
          "gradient had already been copied into its bucket.\n"
          "Likely causes: (1) the parameter is used outside the module's forward, or by two "
          "forward/backward passes at once; (2) reentrant activation checkpointing runs a nested "
          "backward per checkpointed call, so a parameter inside two checkpointed calls (or one, "
          "with find_unused_parameters) fires its hook more than once.\n"
          "Fixes: if the graph is the same every iteration, construct DDP with static_graph (it "
          "learns how many times each hook fires); otherwise run the extra passes under no_sync "
          "and allreduce those gradients yourself."),
      {pytorch_phrase::kMarkedTwice});
}

std::string PriorReductionNotFinishedMessage(int rank, const std::vector<ParamRef>& missing,
                                             bool find_unused_parameters, bool static_graph) {
  std::string message =
      StrCat("[ddp] rank ", rank,
             ": the previous iteration's gradient reduction never finished, so this forward cannot "
             "start a new one. ");
  if (static_graph) {
    StrAppend(&message,
              "With static_graph every iteration must use the same parameters as the first; "
              "this one left some without a gradient (the training graph changed). Use the "
              "same parameters every iteration, or drop static_graph and set "
              "find_unused_parameters.");
  } else if (find_unused_parameters) {
    StrAppend(&message,
              "find_unused_parameters is on, so the parameters below were expected to get a "
              "gradient: most likely a forward output did not take part in the loss. Make "
              "every output of forward contribute to the loss.");
  } else {
    StrAppend(&message,
              "The module has parameters that did not take part in producing the loss. "
              "Construct DDP with find_unused_parameters (and make every output of forward "
              "contribute to the loss), or stop creating those parameters.");
  }
  StrAppend(&message, "\nParameters that received no gradient on rank ", rank, ":");
  for (const ParamRef& p : missing) StrAppend(&message, "\n  ", p.index, " ", p.name);
  if (static_graph) {
    return WithPyTorchPhrase(std::move(message),
                             {pytorch_phrase::kPriorReduction, pytorch_phrase::kGraphChanged});
  }
  return WithPyTorchPhrase(std::move(message), {pytorch_phrase::kPriorReduction});
}

std::string StaticGraphChangedMessage(int rank, const ParamRef& param, int expected_count) {
  return WithPyTorchPhrase(
      StrCat("[ddp] rank ", rank, ": the training graph changed under static_graph: ",
             Describe(param), "'s gradient hook fired ",
             expected_count == 0 ? "although the parameter was unused in the first iteration"
                                 : StrCat("more than the ", expected_count,
                                          " time(s) recorded in the first iteration"),
             ". static_graph needs every iteration to use the same parameters the same number "
             "of times; drop static_graph (with find_unused_parameters if some parameters go "
             "unused)."),
      {pytorch_phrase::kGraphChanged});
}

absl::Status CommFailure(int rank, std::string_view what, const absl::Status& status,
                         std::string_view op) {
  return absl::Status(status.code(),
                      StrCat("[", op, "] rank ", rank, ": ", what, " failed: ", status.message()));
}

void ThrowCommFailure(int rank, std::string_view what, const absl::Status& status,
                      std::string_view op) {
  ThrowStatus(CommFailure(rank, what, status, op));
}

}  // namespace ddpkit::reducer
