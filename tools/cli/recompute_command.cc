// `ddpkit recompute`: reentrant activation checkpointing under DDP — the "marked ready twice"
// error as a user meets it, and the two fixes (static_graph; no_sync + one fused allreduce)
// checked against one process, timed, and the activation memory checkpointing saves.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "tools/cli/comm_flags.h"
#include "tools/cli/commands.h"
#include "tools/cli/ddp_flags.h"
#include "tools/cli/job_flags.h"
#include "tools/cli/print_json.h"
#include "tools/jobs/recompute/recompute.h"

ABSL_FLAG(int32_t, blocks, 4, "checkpointed residual MLP blocks (K)");
ABSL_FLAG(int64_t, width, 256, "the blocks' width W (each block is W -> 4W -> W)");

namespace ddpkit::cli {
namespace {

std::string Megabytes(int64_t bytes) { return absl::StrFormat("%.2f MB", bytes / 1e6); }

void PrintErrorRun(const jobs::RecomputeRun& run) {
  std::cout << absl::StrFormat("1. plain DDP (%s): ", run.ddp_options());
  if (run.ok()) {
    std::cout << "no error (nothing was marked ready twice)\n\n";
    return;
  }
  std::cout << "stopped at the first backward, on every rank:\n\n     "
            << absl::StrReplaceAll(run.error(), {{"\n", "\n     "}}) << "\n\n";
}

void PrintFixes(const jobs::RecomputeReport& r) {
  std::cout << absl::StrFormat(
      "2. the fixes, against one process on the global batch (%d rows), %d steps\n",
      r.batch_size() * r.world_size(), r.steps());
  std::cout << absl::StrFormat("   %-14s %10s %10s %22s %9s %11s %9s %9s\n", "run", "grad err",
                               "param err", "step ms median (range)", "comm ms", "exposed ms",
                               "loss@1", "loss@end");
  for (const jobs::RecomputeRun& run : r.runs()) {
    if (!run.ok() || run.losses_size() == 0) continue;
    std::cout << absl::StrFormat(
        "   %-14s %10.2e %10.2e %8.2f (%.2f-%.2f) %9.2f %5.2f (%3.0f%%) %9.4f %9.4f\n", run.name(),
        run.grad_rel_error(), run.param_rel_error(), run.step_ms_median(), run.step_ms_min(),
        run.step_ms_max(), run.comm_ms(), run.exposed_comm_ms(),
        run.comm_ms() > 0 ? 100 * run.exposed_comm_ms() / run.comm_ms() : 0.0, run.losses(0),
        run.losses(run.losses_size() - 1));
  }
  const jobs::RecomputeRun* static_graph = nullptr;
  for (const jobs::RecomputeRun& run : r.runs()) {
    if (run.name() == "static_graph" && run.ok()) static_graph = &run;
    if (run.name() == "no_sync_fused" && run.ok() && static_graph != nullptr) {
      std::cout << absl::StrFormat(
          "   static_graph hides %.0f%% of its communication behind backward; no_sync + fused "
          "hides none: %+.2f ms exposed per step\n",
          100 * (1 - static_graph->exposed_comm_ms() / static_graph->comm_ms()),
          run.exposed_comm_ms() - static_graph->exposed_comm_ms());
      std::cout << absl::StrFormat(
          "   the two fixes' final parameters are %s\n",
          run.bitwise_equal_to_static_graph() ? "bitwise equal" : "NOT bitwise equal");
    }
  }
  if (absl::StartsWith(r.model(), "resnet:")) {
    std::cout << "   (BatchNorm normalises each rank's rows by their own statistics, so these "
                 "errors are not rounding: one process normalises the global batch)\n";
  }
  std::cout << "   (errors: max |ddp - one process| / max |one process|, float32; comm: first "
               "launch to last completion, per step; exposed: what the step waits for after "
               "backward)\n\n";
}

void PrintMemory(const jobs::RecomputeReport& r) {
  std::cout << absl::StrFormat(
      "3. activation memory, one process, %d rows: tensor bytes above the parameters, their "
      "gradients and the data\n   %-18s %14s %18s\n",
      r.batch_size(), "", "after forward", "peak in backward");
  int64_t peak[2] = {0, 0};
  for (const jobs::ActivationMemory& m : r.memory()) {
    peak[m.checkpoint()] = m.peak_bytes();
    std::cout << absl::StrFormat("   %-18s %14s %18s\n",
                                 m.checkpoint() ? "checkpointing" : "no checkpointing",
                                 Megabytes(m.after_forward_bytes()), Megabytes(m.peak_bytes()));
  }
  if (peak[0] > 0) {
    std::cout << absl::StrFormat("   checkpointing %d blocks saves %s at the peak (%.0f%%)\n",
                                 r.blocks(), Megabytes(peak[0] - peak[1]),
                                 100.0 * (peak[0] - peak[1]) / peak[0]);
  }
}

void PrintReport(const jobs::RecomputeReport& r) {
  const std::string model =
      r.width() > 0
          ? absl::StrFormat("%d checkpointed blocks (%d -> %d -> %d)", r.blocks(), r.width(),
                            4 * r.width(), r.width())
          : absl::StrFormat("%s, its %d %s checkpointed", r.model(), r.blocks(), r.checkpointed());
  std::cout << absl::StrFormat(
      "ddpkit recompute: %s, %d ranks (%s), %d rows per rank, SGD lr %g; parameters %s, bucket "
      "cap %g MB; %s\n\n",
      model, r.world_size(), r.backend(), r.batch_size(), r.lr(), Megabytes(r.parameter_bytes()),
      r.bucket_cap_mb(), r.pytorch_rules());
  for (const jobs::RecomputeRun& run : r.runs()) {
    if (run.name() == "plain") PrintErrorRun(run);
  }
  PrintFixes(r);
  PrintMemory(r);
  for (const std::string& file : r.trace_files()) std::cout << "wrote " << file << "\n";
  if (r.trace_files_size() > 0 && TracesPerRank(r.backend())) {
    std::cout << "each process wrote its own; to see a run: ddpkit trace merge FILE.<run>.json, "
                 "then ddpkit trace svg FILE.<run>.json --out <run>.svg\n";
  }
}

absl::StatusOr<jobs::RecomputeConfig> ConfigFromFlags() {
  jobs::RecomputeConfig config;
  DDPKIT_RETURN_IF_ERROR(WorldFromFlags(config.world));
  if (!FlagDiffersFromDefault("world_size")) config.world.world_size = 2;
  config.shape.blocks = absl::GetFlag(FLAGS_blocks);
  config.shape.width = absl::GetFlag(FLAGS_width);
  if (FlagDiffersFromDefault("model")) {
    if (FlagDiffersFromDefault("blocks") || FlagDiffersFromDefault("width")) {
      return absl::InvalidArgumentError(
          "--blocks and --width shape the built-in block MLP; a --model brings its own blocks "
          "(a GPT's transformer.h.N, a ResNet's stages): give one or the other");
    }
    config.model = absl::GetFlag(FLAGS_model);
  }
  config.batch_size = FlagDiffersFromDefault("batch_size") ? absl::GetFlag(FLAGS_batch_size) : 64;
  config.steps = FlagDiffersFromDefault("steps") ? absl::GetFlag(FLAGS_steps) : 20;
  config.lr = FlagDiffersFromDefault("lr") ? absl::GetFlag(FLAGS_lr) : 0.05;
  config.seed = absl::GetFlag(FLAGS_seed);
  DDPKIT_ASSIGN_OR_RETURN(config.ddp, DdpCapsFromFlags());
  config.trace_path = absl::GetFlag(FLAGS_trace);
  return config;
}

int RunRecomputeCommand(const std::vector<std::string>&) {
  absl::StatusOr<jobs::RecomputeConfig> config = ConfigFromFlags();
  if (!config.ok()) return Fail("recompute", config.status());
  absl::StatusOr<jobs::RecomputeReport> report = jobs::RunRecompute(*config);
  if (!report.ok()) return Fail("recompute", report.status());
  return EmitReport<jobs::RecomputeReport>(*report, absl::GetFlag(FLAGS_json), PrintReport);
}

}  // namespace

Subcommand RecomputeSubcommand() {
  return {.name = "recompute",
          .summary =
              "activation checkpointing under DDP: the 'marked ready twice' error and "
              "its two fixes, side by side",
          .usage =
              "ddpkit recompute [--world-size N | --backend gloo under ddpkit launch] "
              "[--blocks K --width W | --model gpt:...|resnet:...] [--batch-size b] [--steps N] "
              "[--lr X] [--seed S] [--pytorch-version V] [--bucket-cap-mb MB] [--trace FILE.json] "
              "[--json]",
          .flag_names = {"blocks", "width", "model", "batch_size", "steps", "lr", "seed",
                         "pytorch_version", "bucket_cap_mb", "json", "backend", "world_size",
                         "timeout", "trace"},
          .own_defaults = {{"model", "(none: the block MLP of --blocks, --width)"},
                           {"world_size", "2"},
                           {"batch_size", "64"},
                           {"steps", "20"},
                           {"lr", "0.05"}},
          .run = RunRecomputeCommand};
}

}  // namespace ddpkit::cli
