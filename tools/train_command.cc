// `ddpkit train`: data-parallel training of an MLP with DistributedDataParallel, told as a
// story: the bucket plan, its rebuild after the first iteration, the loss per step and how much
// communication the backward pass hid.
#include <unistd.h>

#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "tools/cli/commands.h"
#include "tools/comm_flags.h"
#include "tools/ddp_flags.h"
#include "tools/trainer.h"

ABSL_FLAG(std::string, model, "mlp:32,64,64,10",
          "model spec mlp:IN,H1,...,OUT (Linear/ReLU alternating; parameters named 0.weight, "
          "0.bias, 2.weight, ... as PyTorch's nn.Sequential)");
ABSL_FLAG(std::string, weights, "", "initial weights: a safetensors state dict");
ABSL_FLAG(std::string, data, "",
          "training rows: a safetensors file with x (float32 [N, IN]) and y (int64 [N]); "
          "default: a seeded synthetic task");
ABSL_FLAG(int32_t, batch_size, 32, "rows per rank per micro-batch");
ABSL_FLAG(int32_t, steps, 60, "optimizer steps");
ABSL_FLAG(int32_t, grad_accum, 1,
          "micro-batches per optimizer step; all but the last run under no_sync");
ABSL_FLAG(double, lr, 0.1, "SGD learning rate");
ABSL_FLAG(double, momentum, 0.0, "SGD momentum");
ABSL_FLAG(std::string, optimizer, "sgd",
          "train and join: sgd (every rank steps every parameter) or zero-sgd (ZeRO stage 1: "
          "each rank steps and keeps momentum for its shard, then broadcasts it); "
          "contrastive: sgd or adam");
ABSL_FLAG(uint64_t, seed, 0, "seed for the model's initialisation and the synthetic data");
ABSL_FLAG(std::string, save_weights, "",
          "write rank 0's final weights here (safetensors, atomically)");
ABSL_FLAG(std::string, save_grads, "",
          "write rank 0's gradients after the last backward, before its update (safetensors)");
ABSL_FLAG(bool, json, false, "print only a JSON report on stdout");

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

const char* YesNo(bool b) { return b ? "on" : "off"; }

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

int RunTrain(const std::vector<std::string>&) {
  absl::StatusOr<CommSetup> comm = CommSetupFromFlags();
  if (!comm.ok()) {
    std::cerr << "ddpkit train: " << comm.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<reducer::DdpOptions> ddp = DdpOptionsFromFlags();
  if (!ddp.ok()) {
    std::cerr << "ddpkit train: " << ddp.status().message() << "\n";
    return kExitUsage;
  }
  tools::TrainConfig config;
  config.model = absl::GetFlag(FLAGS_model);
  config.weights_path = absl::GetFlag(FLAGS_weights);
  config.data_path = absl::GetFlag(FLAGS_data);
  config.batch_size = absl::GetFlag(FLAGS_batch_size);
  config.steps = absl::GetFlag(FLAGS_steps);
  config.grad_accum = absl::GetFlag(FLAGS_grad_accum);
  config.lr = absl::GetFlag(FLAGS_lr);
  config.momentum = absl::GetFlag(FLAGS_momentum);
  config.optimizer = absl::GetFlag(FLAGS_optimizer);
  config.seed = absl::GetFlag(FLAGS_seed);
  config.save_weights_path = absl::GetFlag(FLAGS_save_weights);
  config.save_grads_path = absl::GetFlag(FLAGS_save_grads);
  config.backend = comm->backend;
  config.world_size = comm->world_size;
  config.comm_options = comm->options;
  config.ddp = *ddp;
  config.comm_hook = absl::GetFlag(FLAGS_comm_hook);
  const bool json = absl::GetFlag(FLAGS_json);
  const bool terminal = ::isatty(STDERR_FILENO);

  tools::TrainObserver observer;
  bool rebuilt_shown = false;
  observer.on_start = [&](const tools::TrainReport& setup, const reducer::DdpLoggingData& log) {
    if (json) return;
    std::cout << absl::StrFormat("ddpkit train: %s, %d parameter tensors (%d elements)\n",
                                 setup.model(), setup.parameter_names_size(),
                                 setup.num_parameters())
              << absl::StrFormat(
                     "world: %d ranks (%s); per rank %d rows x %d micro-batch(es) per step\n",
                     setup.world_size(), setup.backend(), setup.batch_size(), setup.grad_accum())
              << absl::StrFormat("data: %s; %s lr %g, momentum %g, %d steps\n", setup.data(),
                                 setup.optimizer() == "zero-sgd" ? "ZeRO-1 SGD" : "SGD", setup.lr(),
                                 setup.momentum(), setup.steps())
              << absl::StrFormat(
                     "DDP: find_unused_parameters=%s static_graph=%s "
                     "gradient_as_bucket_view=%s comm_hook=%s\n\n",
                     YesNo(log.find_unused_parameters()), YesNo(log.static_graph()),
                     YesNo(log.gradient_as_bucket_view()),
                     log.comm_hook().empty() ? "none" : log.comm_hook())
              << "initial buckets (reduction order; "
              << (log.find_unused_parameters() && !log.static_graph()
                      ? "limits [first bucket, cap], reversed"
                      : "one per dtype until the rebuild")
              << "):\n"
              << PlanLines(log.initial_buckets()) << "\n"
              << absl::StrFormat("%6s  %10s  %9s\n", "step", "loss(r0)", "ms");
  };
  observer.on_step = [&](const tools::StepProgress& p) {
    if (!json) {
      std::cout << absl::StrFormat("%6d  %10.6f  %9.3f\n", p.step, p.loss, p.step_ms);
      if (!rebuilt_shown && p.ddp->has_rebuilt_buckets()) {
        rebuilt_shown = true;
        std::cout
            << "  buckets rebuilt at this step's forward, in step 1's gradient-arrival order ("
            << absl::StrJoin(p.ddp->prev_iteration_grad_ready_order_indices(), " ")
            << "), rank 0's plan broadcast to all:\n"
            << PlanLines(p.ddp->rebuilt_buckets());
      }
    } else if (terminal) {  // progress for a person watching; stdout stays pure JSON
      std::cerr << absl::StrFormat("\rstep %d/%d  loss %.6f", p.step, p.steps, p.loss)
                << (p.step == p.steps ? "\n" : "") << std::flush;
    }
  };
  absl::StatusOr<tools::TrainResult> result = tools::Train(config, observer);
  if (!result.ok()) {
    std::cerr << "ddpkit train: " << result.status().message() << "\n";
    return result.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  if (result->rank != 0) return kExitOk;  // under gloo, rank 0's process reports
  const tools::TrainReport& report = result->report;
  if (json) {
    nlohmann::json out = nlohmann::json::parse(ReportToJson(report));
    out["ddp"] = nlohmann::json::parse(ReportToJson(result->ddp));
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  const auto& losses = report.losses();
  const reducer::DdpLoggingData& log = result->ddp;
  std::cout << absl::StrFormat(
      "\ndone: loss %.4f -> %.4f (mean over ranks), accuracy %.1f%% on all rows, median step "
      "%.3f ms\n",
      losses.empty() ? 0.0 : losses[0], losses.empty() ? 0.0 : losses[losses.size() - 1],
      100 * report.final_accuracy(), report.median_step_ms());
  if (log.num_timed_iterations() > 0) {
    const double comm_ms = Ms(log.avg_backward_comm_time());
    std::cout << absl::StrFormat(
        "per synced iteration on rank 0 (averages): forward %.3f ms, backward compute %.3f ms,\n"
        "  allreduce %.3f ms of which %.3f ms overlapped backward (%.0f%%), %.3f ms exposed "
        "waiting at the end of backward\n",
        Ms(log.avg_forward_compute_time()), Ms(log.avg_backward_compute_time()), comm_ms,
        Ms(log.avg_backward_compute_comm_overlap_time()),
        comm_ms > 0 ? 100 * Ms(log.avg_backward_compute_comm_overlap_time()) / comm_ms : 0.0,
        Ms(log.avg_backward_exposed_comm_time()));
  }
  if (!log.unused_parameter_names().empty()) {
    std::cout << "unused parameters (no rank gave them a gradient): "
              << absl::StrJoin(log.unused_parameter_names(), ", ") << "\n";
  }
  if (!config.save_weights_path.empty())
    std::cout << "saved weights to " << config.save_weights_path << "\n";
  if (!config.save_grads_path.empty())
    std::cout << "saved gradients to " << config.save_grads_path << "\n";
  return kExitOk;
}

}  // namespace

Subcommand TrainSubcommand() {
  std::vector<std::string> flags = {"model",     "weights",    "data",         "batch_size",
                                    "steps",     "grad_accum", "lr",           "momentum",
                                    "optimizer", "seed",       "save_weights", "save_grads",
                                    "json",      "backend",    "world_size",   "timeout"};
  flags.insert(flags.end(), kDdpFlagNames.begin(), kDdpFlagNames.end());
  return {.name = "train",
          .summary = "data-parallel training of an MLP with DDP (synthetic data by default)",
          .usage =
              "ddpkit train [--world-size N | --backend gloo under ddpkit launch] "
              "[--model mlp:IN,...,OUT] [--data FILE] [DDP flags] [flags]",
          .flag_names = flags,
          .run = RunTrain};
}

}  // namespace ddpkit::cli
