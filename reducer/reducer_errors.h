// The reducer's diagnoses of misuse and of failed collectives, kept together so their wording
// stays consistent. Each says what happened, which parameter (index and name) and on which
// rank, and what to do — and ends its first line with the phrase PyTorch 1.13 prints for the
// same failure, ` (PyTorch: "...")`, so a user who met PyTorch's message can search for it.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace ddpkit::reducer {

// PyTorch 1.13's wording (torch/csrc/distributed/c10d/reducer.cpp, torch/distributed/utils.py,
// torch/nn/parallel/distributed.py, ProcessGroupWrapper) of the failures ddpkit diagnoses.
namespace pytorch_phrase {
inline constexpr std::string_view kMarkedTwice = "Expected to mark a variable ready only once";
inline constexpr std::string_view kPriorReduction =
    "Expected to have finished reduction in the prior iteration before starting a new one";
inline constexpr std::string_view kGraphChanged =
    "Your training graph has changed in this iteration";
inline constexpr std::string_view kDifferentModels = "DDP expects same model across all ranks";
inline constexpr std::string_view kNoTrainableParameter =
    "DistributedDataParallel is not needed when a module doesn't have any parameter that "
    "requires a gradient";
inline constexpr std::string_view kSecondCommHook =
    "register_comm_hook or register_builtin_comm_hook can only be called once";
}  // namespace pytorch_phrase

// `message` with ` (PyTorch: "<phrase>"; "<phrase>")` at the end of its first line.
std::string WithPyTorchPhrase(std::string message, std::initializer_list<std::string_view> phrases);

struct ParamRef {
  size_t index;
  std::string name;
};

// A parameter's hook fired a second time in one synced backward.
std::string MarkedTwiceMessage(int rank, const ParamRef& param);

// The previous synced backward ended without every parameter getting a gradient; raised at
// the next forward. `missing`: the parameters never marked ready, ascending.
std::string PriorReductionNotFinishedMessage(int rank, const std::vector<ParamRef>& missing,
                                             bool find_unused_parameters, bool static_graph);

// Under static_graph, a parameter's hook fired more often than in the first iteration.
std::string StaticGraphChangedMessage(int rank, const ParamRef& param, int expected_count);

// A collective that failed (a timeout, a dead peer): "[<op>] rank R: <what> failed: " and the
// comm layer's diagnosis, keeping `status`'s code.
absl::Status CommFailure(int rank, std::string_view what, const absl::Status& status,
                         std::string_view op = "ddp");
// The same, thrown (tier 4 of autograd/base/error.h): for code that runs inside backward (the
// reducer's hooks and finalize) or in an override that cannot return a Status (DDP's Forward,
// its join hook, ZeRO's Step). RunOnEveryRank turns it back into a Status.
[[noreturn]] void ThrowCommFailure(int rank, std::string_view what, const absl::Status& status,
                                   std::string_view op = "ddp");

}  // namespace ddpkit::reducer
