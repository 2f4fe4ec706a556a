// `ddpkit join`: the uneven-input scenario runner. Ranks get different numbers of batches; the
// output shows, iteration by iteration, who is still training, who has joined and is
// shadowing, and the collectives each side issued — the same list, which is the whole trick.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tools/cli/check_verdict.h"
#include "tools/cli/commands.h"
#include "tools/cli/job_flags.h"
#include "tools/cli/print_json.h"
#include "tools/jobs/join/join_runner.h"

ABSL_DECLARE_FLAG(int32_t, grad_accum);  // tools/cli/train_command.cc

ABSL_FLAG(std::string, inputs, "",
          "iterations per rank on synthetic rows, e.g. 5,6,3,8 (sets the world size)");
ABSL_FLAG(std::string, data_per_rank, "",
          "PREFIX: rank r trains on PREFIX.rank<r>.safetensors (x, y), floor(rows / batch) "
          "iterations");
ABSL_FLAG(bool, divide_by_initial_world_size, true,
          "true: divide the summed gradients by the world size (joined ranks add zeros); false: "
          "by the number of ranks still active");
ABSL_FLAG(bool, throw_on_early_termination, false,
          "stop every rank, in the same iteration, as soon as one runs out (for models with "
          "collectives Join cannot shadow)");
ABSL_FLAG(bool, no_join, false, "run without Join, to see the failure uneven inputs cause");

namespace ddpkit::cli {
namespace {

absl::StatusOr<std::vector<int>> ParseInputs(const std::string& text) {
  std::vector<int> inputs;
  if (text.empty()) return inputs;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(piece, &n) || n < 0) {
      return absl::InvalidArgumentError(StrCat("--inputs: '", std::string(piece),
                                               "' is not a count >= 0 (expected e.g. 5,6,3,8)"));
    }
    inputs.push_back(n);
  }
  return inputs;
}

std::string Ranks(const google::protobuf::RepeatedField<int32_t>& ranks) {
  return ranks.empty() ? "none" : absl::StrJoin(ranks, " ");
}

void PrintStory(const jobs::JoinReport& r) {
  std::cout
      << absl::StrFormat(
             "ddpkit join: %s on %d ranks (%s); iterations per rank: %s (%d rows each)\n",
             r.model(), r.world_size(), r.backend(), absl::StrJoin(r.inputs(), " "), r.batch_size())
      << "data: " << r.data() << "\n"
      << absl::StrFormat(
             "Join: %s, divide_by_initial_world_size=%s, throw_on_early_termination=%s; "
             "optimizer %s; %s\n\n",
             r.join() ? "on" : "OFF", r.divide_by_initial_world_size() ? "true" : "false",
             r.throw_on_early_termination() ? "true" : "false", r.optimizer(), r.pytorch_rules())
      << "Reading the collectives, in issue order:\n"
         "  ALLREDUCE int64[1] SUM    the count of active ranks (active ranks add 1, joined ranks "
         "0)\n"
      << (r.throw_on_early_termination() ? "  ALLREDUCE int64[1] SUM    throw mode: has a rank run "
                                           "out? (active 0, a joined rank 1)\n"
                                         : "")
      << "  ALLREDUCE int64[1] MAX    this iteration's plan: sync? rebuild? buffers?\n"
         "  BROADCAST int32 (twice)   once, at the rebuild: rank 0's bucket plan\n"
         "  ALLREDUCE float32[n] SUM  each gradient bucket, in bucket order\n"
         "  ALLREDUCE int32[P] SUM    the used-parameter map (--find-unused-parameters; "
         "--static-graph: once)\n"
         "  ALLREDUCE int32[P] MAX    --static-graph, once: the hook counts, so a joined rank "
         "learns the graph\n"
      << (r.optimizer() == "zero-sgd"
              ? "  BROADCAST float32 from o  ZeRO: each parameter from the rank that owns it\n"
              : "")
      << "A joined rank issues the same list, contributing zeros.\n\n";
  for (const jobs::JoinIteration& it : r.iterations()) {
    std::string divide = it.divide_factor() > 0
                             ? absl::StrFormat("summed gradients / %g", it.divide_factor())
                             : "a comm hook did the division";
    if (!it.completed()) {
      std::cout << absl::StrFormat(
          "iteration %d: active %s, ran out: %s -> throw_on_early_termination "
          "stops every rank here\n",
          it.iteration(), Ranks(it.active_ranks()), Ranks(it.shadowing_ranks()));
    } else {
      std::cout << absl::StrFormat(
          "iteration %d: active %s | shadowing %s | loss %.4f | |grad| %.4f | %s\n", it.iteration(),
          Ranks(it.active_ranks()), Ranks(it.shadowing_ranks()), it.loss(), it.grad_norm(), divide);
    }
    std::cout << absl::StrFormat("    rank %d (active)    issued %s\n", it.active_reporter(),
                                 absl::StrJoin(it.active_collectives(), ", "));
    if (it.shadow_reporter() < 0) continue;
    const bool same = it.active_collectives_size() == it.shadowing_collectives_size() &&
                      std::equal(it.active_collectives().begin(), it.active_collectives().end(),
                                 it.shadowing_collectives().begin());
    if (same) {
      std::cout << absl::StrFormat(
          "    rank %d (shadowing) issued the same %d collective(s), with zeros\n",
          it.shadow_reporter(), it.shadowing_collectives_size());
    } else {
      std::cout << absl::StrFormat("    rank %d (shadowing) issued %s\n", it.shadow_reporter(),
                                   absl::StrJoin(it.shadowing_collectives(), ", "));
    }
  }
  std::cout << "\n";
  if (r.stopped_at_iteration() >= 0) {
    std::cout << absl::StrFormat(
        "stopped: every rank raised in iteration %d (rank 0's error: %s).\n"
        "No final sync ran; the models are identical because every completed iteration was "
        "synced.\n",
        r.stopped_at_iteration(), r.stop_message());
  } else if (r.join()) {
    std::cout << absl::StrFormat(
        "all ranks joined after %d iteration(s); rank %d was the highest of the last to join and "
        "its "
        "model was broadcast to every rank\n",
        r.iterations_size(), r.authoritative_rank());
  }
  std::cout << "final models identical on all ranks: " << (r.models_identical() ? "yes" : "NO")
            << "\n";
  std::cout << "parameter elements each rank's optimizer steps: "
            << absl::StrJoin(r.elements_stepped(), " ")
            << (r.optimizer() == "zero-sgd" ? " (ZeRO-1 shards)" : "") << "\n";
  std::cout << absl::StrFormat("rank 0's final accuracy on its own rows: %.1f%%\n",
                               100 * r.final_accuracy());
  if (!r.reference().empty()) {
    std::cout << absl::StrFormat(
        "one process on the union of the ranks' rows: largest |DDP - it| %.3g (%s), bound "
        "%.3g: %s\n",
        r.reference_max_abs_diff(), r.reference_worst_parameter(), r.reference_tolerance(),
        r.reference_agrees() ? "equal" : "DIFFERENT");
  }
}

absl::StatusOr<jobs::JoinRunConfig> ConfigFromFlags() {
  jobs::JoinRunConfig config;
  DDPKIT_RETURN_IF_ERROR(DdpTrainingFromFlags(config));
  DDPKIT_ASSIGN_OR_RETURN(config.inputs, ParseInputs(absl::GetFlag(FLAGS_inputs)));
  config.data_prefix = absl::GetFlag(FLAGS_data_per_rank);
  config.use_join = !absl::GetFlag(FLAGS_no_join);
  config.divide_by_initial_world_size = absl::GetFlag(FLAGS_divide_by_initial_world_size);
  config.throw_on_early_termination = absl::GetFlag(FLAGS_throw_on_early_termination);
  config.grad_accum = absl::GetFlag(FLAGS_grad_accum);
  DDPKIT_ASSIGN_OR_RETURN(config.reference_one_process, ReferenceOneProcessFromFlags());
  // --inputs sets the world size; --world-size only when given (and then it must agree).
  if (!FlagDiffersFromDefault("world_size") && !config.inputs.empty()) config.world.world_size = 0;
  if (!config.use_join && config.throw_on_early_termination) {
    return absl::InvalidArgumentError(
        "--throw-on-early-termination is a Join option; it cannot go with --no-join");
  }
  return config;
}

int RunJoinCommand(const std::vector<std::string>&) {
  absl::StatusOr<jobs::JoinRunConfig> config = ConfigFromFlags();
  if (!config.ok()) return Fail("join", config.status());
  absl::StatusOr<jobs::JoinReport> report = jobs::RunJoin(*config);
  if (!report.ok()) {
    const int exit = Fail("join", report.status());
    if (exit == kExitFailure && !config->use_join) {
      std::cerr << "\nThis is what uneven inputs do without Join: the ranks that ran out left "
                   "their loops while the others still needed them in a collective. Drop "
                   "--no-join to let Join shadow those collectives.\n";
    }
    return exit;
  }
  if (report->left_without_join()) {
    std::cerr << "ddpkit join: this rank ran out of inputs and left without Join; the ranks "
                 "still training will fail in their next collective\n";
    return kExitOk;
  }
  const int exit = EmitReport<jobs::JoinReport>(
      *report, absl::GetFlag(FLAGS_json), [&](const jobs::JoinReport& r) {
        PrintStory(r);
        if (!config->save_weights_path.empty()) {
          std::cout << "saved rank 0's weights to " << config->save_weights_path << "\n";
        }
        if (!config->trace_path.empty()) {
          std::cout << TraceWrittenLine(config->trace_path, r.backend(), r.rank()) << "\n";
        }
      });
  if (!CheckRequested() || report->rank() != 0) return exit;
  return ReportVerdicts("join", ModelVerdicts(*report, "the union of the rows"));
}

}  // namespace

Subcommand JoinSubcommand() {
  std::vector<std::string> flags = {
      "inputs",  "data_per_rank", "divide_by_initial_world_size", "throw_on_early_termination",
      "no_join", "grad_accum"};
  flags.insert(flags.end(), kDdpTrainingFlagNames.begin(), kDdpTrainingFlagNames.end());
  flags.insert(flags.end(), kCheckFlagNames.begin(), kCheckFlagNames.end());
  return {
      .name = "join",
      .summary = "uneven inputs: DDP training where ranks run out at different times, with Join",
      .usage =
          "ddpkit join (--inputs 5,6,3,8 | --data-per-rank PREFIX --world-size N) "
          "[--divide-by-initial-world-size true|false] [--throw-on-early-termination] "
          "[--no-join] [--grad-accum K] [--check] [--reference one-process] [--optimizer "
          "sgd|zero-sgd] [--device cpu|cuda] [train and "
          "DDP flags]",
      .flag_names = flags,
      .run = RunJoinCommand};
}

}  // namespace ddpkit::cli
