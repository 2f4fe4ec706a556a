// `ddpkit train`: train an MLP on a classification task and report the loss per step.
#include <unistd.h>

#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "tools/cli/commands.h"
#include "tools/trainer.h"

ABSL_FLAG(std::string, model, "mlp:32,64,64,10",
          "model spec mlp:IN,H1,...,OUT (Linear/ReLU alternating; parameters named 0.weight, "
          "0.bias, 2.weight, ... as PyTorch's nn.Sequential)");
ABSL_FLAG(std::string, weights, "", "initial weights: a safetensors state dict");
ABSL_FLAG(std::string, data, "",
          "training rows: a safetensors file with x (float32 [N, IN]) and y (int64 [N]); "
          "default: a seeded synthetic task");
ABSL_FLAG(int32_t, batch_size, 32, "rows per step");
ABSL_FLAG(int32_t, steps, 60, "optimizer steps");
ABSL_FLAG(double, lr, 0.1, "SGD learning rate");
ABSL_FLAG(double, momentum, 0.0, "SGD momentum");
ABSL_FLAG(uint64_t, seed, 0, "seed for the model's initialisation and the synthetic data");
ABSL_FLAG(std::string, save_weights, "", "write the final weights here (safetensors, atomically)");
ABSL_FLAG(bool, json, false, "print only a JSON report on stdout");

namespace ddpkit::cli {
namespace {

int RunTrain(const std::vector<std::string>&) {
  tools::TrainConfig config;
  config.model = absl::GetFlag(FLAGS_model);
  config.weights_path = absl::GetFlag(FLAGS_weights);
  config.data_path = absl::GetFlag(FLAGS_data);
  config.batch_size = absl::GetFlag(FLAGS_batch_size);
  config.steps = absl::GetFlag(FLAGS_steps);
  config.lr = absl::GetFlag(FLAGS_lr);
  config.momentum = absl::GetFlag(FLAGS_momentum);
  config.seed = absl::GetFlag(FLAGS_seed);
  config.save_weights_path = absl::GetFlag(FLAGS_save_weights);
  const bool json = absl::GetFlag(FLAGS_json);
  const bool terminal = ::isatty(STDERR_FILENO);

  tools::TrainObserver observer;
  observer.on_start = [&](const tools::TrainReport& setup) {
    if (json) return;
    std::cout << absl::StrFormat("ddpkit train: %s, %d parameter tensors (%d elements)\n",
                                 setup.model(), setup.parameter_names_size(),
                                 setup.num_parameters())
              << absl::StrFormat("data: %s; batch %d, lr %g, momentum %g, %d steps\n\n",
                                 setup.data(), setup.batch_size(), setup.lr(), setup.momentum(),
                                 setup.steps())
              << absl::StrFormat("%6s  %10s  %9s\n", "step", "loss", "ms");
  };
  observer.on_step = [&](const tools::StepProgress& p) {
    if (!json) {
      std::cout << absl::StrFormat("%6d  %10.6f  %9.3f\n", p.step, p.loss, p.step_ms);
    } else if (terminal) {  // progress for a person watching; stdout stays pure JSON
      std::cerr << absl::StrFormat("\rstep %d/%d  loss %.6f", p.step, p.steps, p.loss)
                << (p.step == p.steps ? "\n" : "") << std::flush;
    }
  };
  absl::StatusOr<tools::TrainReport> report = tools::Train(config, observer);
  if (!report.ok()) {
    std::cerr << "ddpkit train: " << report.status().message() << "\n";
    return report.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  if (json) {
    std::cout << ReportToJson(*report);
    return kExitOk;
  }
  const auto& losses = report->losses();
  std::cout << absl::StrFormat(
      "\ndone: %s on %s; loss %.4f -> %.4f, accuracy %.1f%% on all rows, median step %.3f ms\n",
      report->model(), report->data(), losses.empty() ? 0.0 : losses[0],
      losses.empty() ? 0.0 : losses[losses.size() - 1], 100 * report->final_accuracy(),
      report->median_step_ms());
  if (!config.save_weights_path.empty()) {
    std::cout << "saved weights to " << config.save_weights_path << "\n";
  }
  return kExitOk;
}

}  // namespace

Subcommand TrainSubcommand() {
  return {.name = "train",
          .summary = "train an MLP on a classification task (synthetic by default)",
          .usage = "ddpkit train [--model mlp:IN,...,OUT] [--data FILE] [flags]",
          .flag_names = {"model", "weights", "data", "batch_size", "steps", "lr", "momentum",
                         "seed", "save_weights", "json"},
          .run = RunTrain};
}

}  // namespace ddpkit::cli
