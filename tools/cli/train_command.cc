// `ddpkit train`: data-parallel training of an MLP with DistributedDataParallel, told as a
// story: the bucket plan, its rebuild after the first iteration, the loss per step and how much
// communication the backward pass hid.
#include <unistd.h>

#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/cli/check_verdict.h"
#include "tools/cli/commands.h"
#include "tools/cli/job_flags.h"
#include "tools/cli/print_json.h"
#include "tools/jobs/train/trainer.h"

ABSL_FLAG(int32_t, grad_accum, 1,
          "train: micro-batches per optimizer step, all but the last under no_sync; join: "
          "iteration t syncs only when t % K == 0, the others run under no_sync and step with "
          "their local gradients (PyTorch's uneven-inputs test)");
ABSL_FLAG(std::string, save_grads, "",
          "write rank 0's gradients after the last backward, before its update (safetensors)");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "resume from the latest intact checkpoint in DIR (if any) and write one there every "
          "--checkpoint-every steps and after the last; a folder all ranks can reach "
          "(docs/reliability.md)");
ABSL_FLAG(int32_t, checkpoint_every, ddpkit::checkpoint::CheckpointOptions{}.every,
          "with --checkpoint-dir: optimizer steps between checkpoints (>= 1)");
ABSL_FLAG(int32_t, checkpoint_keep, ddpkit::checkpoint::CheckpointOptions{}.keep,
          "with --checkpoint-dir: committed checkpoints to keep; older ones are deleted once a "
          "newer one is committed (>= 1)");

namespace ddpkit::cli {
namespace {

std::string PlanLines(const google::protobuf::RepeatedPtrField<reducer::BucketInfo>& buckets) {
  std::string out;
  for (int b = 0; b < buckets.size(); ++b) {
    const reducer::BucketInfo& info = buckets[b];
    out += absl::StrFormat("    bucket %d: %9d bytes  %s\n", b, info.bytes(),
                           absl::StrJoin(info.param_names(), ", "));
  }
  return out;
}

const char* OnOff(bool b) { return b ? "on" : "off"; }

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

// train's own default model: big enough (3.7 MB of gradients) that PyTorch's plan at its default
// cap has two buckets after the rebuild — 2.x's first bucket capped at 1 MiB — whose allreduces
// overlap backward. The shared default (the other jobs') is a 27 KB MLP: one bucket, nothing
// to overlap. A run on --data or --text names its model.
constexpr char kTrainDefaultModel[] = "mlp:32,512,512,512,512,10";

absl::StatusOr<jobs::TrainConfig> ConfigFromFlags() {
  jobs::TrainConfig config;
  DDPKIT_RETURN_IF_ERROR(DdpTrainingFromFlags(config));
  if (!FlagGiven("model")) config.model = kTrainDefaultModel;
  config.data_path = absl::GetFlag(FLAGS_data);
  config.text_path = absl::GetFlag(FLAGS_text);
  config.eval_path = absl::GetFlag(FLAGS_eval_data);
  config.save_grads_path = absl::GetFlag(FLAGS_save_grads);
  config.steps = absl::GetFlag(FLAGS_steps);
  config.grad_accum = absl::GetFlag(FLAGS_grad_accum);
  config.checkpoint = {.dir = absl::GetFlag(FLAGS_checkpoint_dir),
                       .every = absl::GetFlag(FLAGS_checkpoint_every),
                       .keep = absl::GetFlag(FLAGS_checkpoint_keep)};
  config.check_models_identical = CheckRequested();
  DDPKIT_ASSIGN_OR_RETURN(config.reference_one_process, ReferenceOneProcessFromFlags());
  const checkpoint::CheckpointOptions defaults;
  if (config.checkpoint.dir.empty() &&
      (config.checkpoint.every != defaults.every || config.checkpoint.keep != defaults.keep)) {
    return absl::InvalidArgumentError(
        "--checkpoint-every and --checkpoint-keep need --checkpoint-dir DIR");
  }
  return config;
}

// Before the first step: the job, the world, DDP's options and its initial buckets.
void PrintSetup(const jobs::TrainReport& setup) {
  const reducer::DdpLoggingData& log = setup.ddp();
  std::cout << absl::StrFormat("ddpkit train: %s, %d parameter tensors (%d elements)\n",
                               setup.model(), setup.parameter_names_size(), setup.num_parameters())
            << absl::StrFormat(
                   "world: %d ranks (%s); per rank %d rows x %d micro-batch(es) per step; %s; "
                   "float32 GEMMs: %s\n",
                   setup.world_size(), setup.backend(), setup.batch_size(), setup.grad_accum(),
                   setup.thread_budget(), setup.gemm_library())
            << absl::StrFormat("data: %s; %s lr %g, momentum %g, %d steps\n", setup.data(),
                               setup.optimizer() == "zero-sgd" ? "ZeRO-1 SGD" : "SGD", setup.lr(),
                               setup.momentum(), setup.steps())
            << absl::StrFormat(
                   "DDP as PyTorch %s does it: find_unused_parameters=%s static_graph=%s "
                   "gradient_as_bucket_view=%s comm_hook=%s\n\n",
                   log.pytorch_version(), OnOff(log.find_unused_parameters()),
                   OnOff(log.static_graph()), OnOff(log.gradient_as_bucket_view()),
                   log.comm_hook().empty() ? "none" : log.comm_hook())
            << "initial buckets (reduction order; "
            << (log.find_unused_parameters() && !log.static_graph()
                    ? "limits [first bucket, cap], reversed"
                    : "one per dtype until the rebuild")
            << "):\n"
            << PlanLines(log.initial_buckets()) << "\n"
            << absl::StrFormat("%6s  %10s  %9s\n", "step", "loss(r0)", "ms");
}

// What the story has told already.
struct Told {
  bool rebuilt = false;
  bool compressing = false;
};

// "1744 bytes allreduced per step instead of 27688 (15.9x less)".
std::string WireLine(const reducer::CompressionStats& c) {
  return absl::StrFormat("%d bytes allreduced per step instead of %d (%.1fx less)",
                         c.wire_bytes_per_step(), c.allreduce_bytes_per_step(),
                         c.compression_ratio());
}

// A step's line, the rebuilt plan after the step that rebuilt it, and the first step a
// compressing hook sent less than a plain allreduce.
void PrintStep(const jobs::StepProgress& p, Told& told) {
  std::cout << absl::StrFormat("%6d  %10.6f  %9.3f\n", p.step, p.loss, p.step_ms);
  if (!told.rebuilt && p.ddp->has_rebuilt_buckets()) {
    told.rebuilt = true;
    std::cout << "  buckets rebuilt at this step's forward, in step 1's gradient-arrival order ("
              << absl::StrJoin(p.ddp->prev_iteration_grad_ready_order_indices(), " ")
              << "), rank 0's plan broadcast to all:\n"
              << PlanLines(p.ddp->rebuilt_buckets());
  }
  const reducer::CompressionStats& c = p.ddp->compression();
  if (!told.compressing && p.ddp->has_compression() &&
      c.wire_bytes_per_step() < c.allreduce_bytes_per_step()) {
    told.compressing = true;
    std::cout << absl::StrFormat("  %s compresses from this step (rank %d): %s\n",
                                 p.ddp->comm_hook(), c.matrix_approximation_rank(), WireLine(c));
  }
}

// PyTorch's can_set_static_graph, told: why --static-graph could be turned on.
std::string StaticGraphLine(const reducer::DdpLoggingData& log) {
  const std::string why =
      log.find_unused_parameters()
          ? "the set of unused parameters never changed between synced iterations and no "
            "gradient hook fired twice; --static-graph would skip find_unused_parameters' graph "
            "search each iteration"
          : "every parameter got its gradient once in every synced iteration";
  return absl::StrFormat(
      "static_graph=True would be safe here: %s (PyTorch's can_set_static_graph, over %d synced "
      "iterations)",
      why, log.iteration());
}

// The step's parts on rank 0, averaged over the synced iterations after the first two (the
// warm-up and the bucket rebuild) once there are any, else over all.
void PrintTimings(const reducer::DdpLoggingData& log) {
  const reducer::TimedAverages& steady = log.steady_averages();
  const bool warm = steady.iterations() > 0;
  const double forward = Ms(warm ? steady.forward_compute_time() : log.avg_forward_compute_time());
  const double compute =
      Ms(warm ? steady.backward_compute_time() : log.avg_backward_compute_time());
  const double comm = Ms(warm ? steady.backward_comm_time() : log.avg_backward_comm_time());
  const double overlap = Ms(warm ? steady.backward_compute_comm_overlap_time()
                                 : log.avg_backward_compute_comm_overlap_time());
  const double exposed =
      Ms(warm ? steady.backward_exposed_comm_time() : log.avg_backward_exposed_comm_time());
  const std::string over =
      warm ? absl::StrFormat(
                 "averages over synced iterations 3-%d; the warm-up and the rebuild "
                 "left out",
                 log.num_timed_iterations())
           : "averages";
  std::cout << absl::StrFormat(
      "per synced iteration on rank 0 (%s):\n  forward %.3f ms, backward compute %.3f ms, "
      "allreduce %.3f ms of which %.3f ms overlapped backward (%.0f%%),\n  %.3f ms exposed "
      "(the end of backward to the end of finalize: the allreduces left, and the copy back)\n",
      over, forward, compute, comm, overlap, comm > 0 ? 100 * overlap / comm : 0.0, exposed);
}

// After the last step: the loss, the accuracy, where the time went, what was saved.
void PrintSummary(const jobs::TrainReport& report, const jobs::TrainConfig& config) {
  const auto& losses = report.losses();
  const reducer::DdpLoggingData& log = report.ddp();
  std::cout << absl::StrFormat(
      "\ndone: loss %.4f -> %.4f (mean over ranks), accuracy %.1f%% on all rows, median step "
      "%.3f ms\n",
      losses.empty() ? 0.0 : losses[0], losses.empty() ? 0.0 : losses[losses.size() - 1],
      100 * report.final_accuracy(), report.median_step_ms());
  if (!report.eval_data().empty()) {
    std::cout << absl::StrFormat("held-out accuracy %.1f%% on %s\n", 100 * report.eval_accuracy(),
                                 report.eval_data());
  }
  if (report.has_models_identical()) {
    std::cout << "final models identical on all ranks: "
              << (report.models_identical() ? "yes" : "NO") << "\n";
  }
  if (!report.reference().empty()) {
    std::cout << absl::StrFormat(
        "one process on each step's global batch: largest |DDP - it| %.3g (%s), bound %.3g: "
        "%s\n",
        report.reference_max_abs_diff(), report.reference_worst_parameter(),
        report.reference_tolerance(), report.reference_agrees() ? "equal" : "DIFFERENT");
  }
  if (!report.sample().empty()) {
    std::cout << "the model writes (200 characters sampled from the first one):\n"
              << report.sample() << "\n";
  }
  if (log.num_timed_iterations() > 0) {
    PrintTimings(log);
    if (config.trace_path.empty()) {
      std::cout << "  see it: add --trace t.json, then `ddpkit trace svg t.json --out t.svg` draws "
                   "each bucket's allreduce against backward\n";
    }
  }
  if (report.host_cache() && report.steps() > 2) {
    std::cout << absl::StrFormat(
        "host memory: %d allocation(s) from the system after the first 2 steps (the caching "
        "allocator serves the rest)\n",
        report.host_allocations_when_warm());
  }
  if (log.has_compression()) {
    const reducer::CompressionStats& c = log.compression();
    std::cout << absl::StrFormat(
        "%s (rank %d, plain allreduce for the first %d synced iterations): in the last step %s; "
        "PyTorch's compression rate over the compressed steps %.2f\n",
        log.comm_hook(), c.matrix_approximation_rank(), c.start_iteration(), WireLine(c),
        c.compress_rate());
  }
  if (!log.unused_parameter_names().empty()) {
    std::cout << "unused parameters (no rank gave them a gradient): "
              << absl::StrJoin(log.unused_parameter_names(), ", ") << "\n";
  }
  if (!log.static_graph() && log.can_set_static_graph() && log.iteration() > 1) {
    std::cout << StaticGraphLine(log) << "\n";
  }
  if (!config.save_weights_path.empty()) {
    std::cout << "saved weights to " << config.save_weights_path << "\n";
  }
  if (!config.save_grads_path.empty()) {
    std::cout << "saved gradients to " << config.save_grads_path << "\n";
  }
  if (const auto& written = report.checkpoints_written(); !written.empty()) {
    std::cout << absl::StrFormat("checkpoints: %d written, the last %s\n", written.size(),
                                 written[written.size() - 1]);
  }
  if (!config.trace_path.empty()) {
    std::cout << TraceWrittenLine(config.trace_path, report.backend(), report.rank()) << "\n";
  }
}

// With --json, stdout carries only the report; a person at a terminal sees progress on stderr.
jobs::TrainObserver ObserverFor(bool json, Told& told) {
  jobs::TrainObserver observer;
  const bool terminal = ::isatty(STDERR_FILENO);
  // Warnings always to stderr; the resume line beside the story (stdout) unless --json.
  observer.on_checkpoint = [json](const std::string& line, bool warning) {
    if (warning) {
      std::cerr << "ddpkit train: warning: " << line << std::endl;
    } else {
      (json ? std::cerr : std::cout) << "ddpkit train: " << line << std::endl;
    }
  };
  if (!json) {
    observer.on_start = PrintSetup;
    observer.on_step = [&told](const jobs::StepProgress& p) { PrintStep(p, told); };
  } else if (terminal) {
    observer.on_step = [](const jobs::StepProgress& p) {
      std::cerr << absl::StrFormat("\rstep %d/%d  loss %.6f", p.step, p.steps, p.loss)
                << (p.step == p.steps ? "\n" : "") << std::flush;
    };
  }
  return observer;
}

int RunTrain(const std::vector<std::string>&) {
  absl::StatusOr<jobs::TrainConfig> config = ConfigFromFlags();
  if (!config.ok()) return Fail("train", config.status());
  const bool json = absl::GetFlag(FLAGS_json);
  Told told;
  absl::StatusOr<jobs::TrainReport> report = jobs::Train(*config, ObserverFor(json, told));
  if (!report.ok()) return Fail("train", report.status());
  const int exit = EmitReport<jobs::TrainReport>(
      *report, json, [&](const jobs::TrainReport& r) { PrintSummary(r, *config); });
  if (!CheckRequested() || report->rank() != 0) return exit;
  return ReportVerdicts("train", ModelVerdicts(*report, "each step's global batch"));
}

}  // namespace

Subcommand TrainSubcommand() {
  std::vector<std::string> flags = {
      "data",       "text",           "eval_data",        "steps",          "grad_accum",
      "save_grads", "checkpoint_dir", "checkpoint_every", "checkpoint_keep"};
  flags.insert(flags.end(), kDdpTrainingFlagNames.begin(), kDdpTrainingFlagNames.end());
  flags.insert(flags.end(), kCheckFlagNames.begin(), kCheckFlagNames.end());
  return {.name = "train",
          .summary = "data-parallel training of a model with DDP (synthetic data by default)",
          .usage =
              "ddpkit train [--world-size N | --backend gloo|nccl under ddpkit launch | --backend "
              "mpi under mpirun] "
              "[--device cpu|cuda] [--model SPEC] [--data FILE | --text FILE] [DDP flags] [flags]",
          .flag_names = flags,
          .own_defaults = {{"model", kTrainDefaultModel}},
          .run = RunTrain};
}

}  // namespace ddpkit::cli
