#include "tools/trainer.h"

#include <algorithm>
#include <chrono>
#include <mutex>

#include "autograd/grad_mode.h"
#include "autograd/nn.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "autograd/safetensors.h"
#include "reducer/zero_redundancy_optimizer.h"
#include "tools/comm_flags.h"
#include "tools/dataset.h"

namespace ddpkit::tools {
namespace {

// Fraction of rows whose largest logit is their label.
double Accuracy(nn::Module& model, const ClassificationData& data) {
  NoGradGuard no_grad;
  Tensor logits = model.Forward(data.x);
  const int64_t classes = logits.size(1);
  int64_t correct = 0;
  for (int64_t r = 0; r < data.rows(); ++r) {
    const float* row = logits.data<float>() + r * classes;
    correct += (std::max_element(row, row + classes) - row) == data.y.data<int64_t>()[r];
  }
  return static_cast<double>(correct) / static_cast<double>(data.rows());
}

absl::Status Validate(const TrainConfig& config) {
  if (config.batch_size <= 0) {
    return absl::InvalidArgumentError(
        StrCat("--batch-size must be positive, got ", config.batch_size));
  }
  if (config.steps < 0) {
    return absl::InvalidArgumentError(StrCat("--steps must be >= 0, got ", config.steps));
  }
  if (config.grad_accum < 1) {
    return absl::InvalidArgumentError(StrCat("--grad-accum must be >= 1, got ", config.grad_accum));
  }
  if (config.lr < 0)
    return absl::InvalidArgumentError(StrCat("--lr must be >= 0, got ", config.lr));
  if (config.backend == "threads" && config.world_size < 1) {
    return absl::InvalidArgumentError(StrCat("--world-size must be >= 1, got ", config.world_size));
  }
  if (!config.comm_hook.empty()) {
    DDPKIT_RETURN_IF_ERROR(reducer::ParseBuiltinCommHook(config.comm_hook).status());
  }
  if (config.optimizer != "sgd" && config.optimizer != "zero-sgd") {
    return absl::InvalidArgumentError(
        StrCat("--optimizer must be sgd or zero-sgd, got '", config.optimizer, "'"));
  }
  return absl::OkStatus();
}

// One rank's training run.
absl::StatusOr<TrainResult> TrainOnRank(const TrainConfig& config,
                                        const std::vector<int64_t>& widths,
                                        comm::ProcessGroup& group, const TrainObserver& observer) {
  const int rank = group.rank(), world = group.size();
  const bool lead = rank == 0;
  const int64_t features = widths.front(), classes = widths.back();

  auto model = nn::MakeMlp(widths, config.seed);
  if (!config.weights_path.empty()) {
    DDPKIT_RETURN_IF_ERROR(LoadStateDict(*model, config.weights_path));
  }
  ClassificationData data;
  if (config.data_path.empty()) {
    data = MakeSyntheticClassification(config.synthetic_rows, features, classes, config.seed + 1);
  } else {
    DDPKIT_ASSIGN_OR_RETURN(data, LoadClassificationData(config.data_path, features, classes));
  }
  DDPKIT_ASSIGN_OR_RETURN(std::shared_ptr<reducer::DistributedDataParallel> ddp,
                          reducer::DistributedDataParallel::Create(model, group, config.ddp));
  if (!config.comm_hook.empty()) {
    ddp->RegisterBuiltinCommHook(*reducer::ParseBuiltinCommHook(config.comm_hook));
  }

  TrainResult result;
  result.rank = rank;
  TrainReport& report = result.report;
  report.set_model(config.model);
  for (const auto& [name, p] : model->NamedParameters()) {
    report.add_parameter_names(name);
    report.set_num_parameters(report.num_parameters() + static_cast<int32_t>(p.numel()));
  }
  report.set_data(data.description);
  report.set_backend(std::string(group.backend_name()));
  report.set_world_size(world);
  report.set_batch_size(config.batch_size);
  report.set_grad_accum(config.grad_accum);
  report.set_steps(config.steps);
  report.set_lr(config.lr);
  report.set_momentum(config.momentum);
  report.set_seed(static_cast<int32_t>(config.seed));
  const SgdOptions sgd{.lr = config.lr, .momentum = config.momentum};
  std::unique_ptr<Optimizer> optimizer;
  if (config.optimizer == "zero-sgd") {
    DDPKIT_ASSIGN_OR_RETURN(
        optimizer, reducer::ZeroRedundancyOptimizer::Create(model->NamedParameters(), group,
                                                            reducer::MakeSgdFactory(sgd)));
    report.set_elements_stepped(static_cast<int32_t>(
        static_cast<reducer::ZeroRedundancyOptimizer&>(*optimizer).shard_elements()));
  } else {
    optimizer = std::make_unique<Sgd>(model->Parameters(), sgd);
    report.set_elements_stepped(report.num_parameters());
  }
  report.set_optimizer(config.optimizer);
  if (lead && observer.on_start) observer.on_start(report, ddp->LoggingData());

  const int64_t b = config.batch_size, global_batch = static_cast<int64_t>(world) * b;
  Tensor x = Tensor::Empty({b, features});
  Tensor y = Tensor::Empty({b}, DType::kInt64);
  std::vector<double> step_ms;
  Tensor losses = Tensor::Zeros({config.steps}, DType::kFloat64);
  for (int step = 0; step < config.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    optimizer->ZeroGrad();
    double loss_sum = 0;
    for (int k = 0; k < config.grad_accum; ++k) {
      const int64_t g = static_cast<int64_t>(step) * config.grad_accum + k;
      GatherRows(data, g * global_batch + rank * b, b, x, y);
      auto micro_step = [&] {
        Tensor loss = CrossEntropy(ddp->Forward(x), y);
        loss.Backward();
        loss_sum += loss.item();
      };
      if (k + 1 < config.grad_accum) {
        auto no_sync = ddp->NoSync();  // accumulate locally; the last micro-batch syncs
        micro_step();
      } else {
        micro_step();
      }
    }
    if (step + 1 == config.steps && lead && !config.save_grads_path.empty()) {
      NamedTensors grads;
      for (const auto& [name, p] : model->NamedParameters()) {
        if (p.grad().defined()) grads.emplace_back(name, p.grad());
      }
      DDPKIT_RETURN_IF_ERROR(WriteSafetensors(config.save_grads_path, grads));
    }
    optimizer->Step();
    step_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    const double loss = loss_sum / config.grad_accum;
    losses.data<double>()[step] = loss;
    if (lead && observer.on_step) {
      observer.on_step({step + 1, config.steps, loss, step_ms.back(), &ddp->LoggingData()});
    }
  }

  // The reported loss of a step is the mean over all ranks (equal batches: the global mean).
  if (config.steps > 0) {
    if (absl::Status s = group.Allreduce(losses)->Wait(); !s.ok()) return s;
  }
  for (int step = 0; step < config.steps; ++step)
    report.add_losses(losses.data<double>()[step] / world);
  report.set_final_accuracy(Accuracy(*model, data));
  if (!step_ms.empty()) {
    std::nth_element(step_ms.begin(), step_ms.begin() + step_ms.size() / 2, step_ms.end());
    report.set_median_step_ms(step_ms[step_ms.size() / 2]);
  }
  if (lead && !config.save_weights_path.empty()) {
    DDPKIT_RETURN_IF_ERROR(SaveStateDict(*model, config.save_weights_path));
  }
  result.ddp = ddp->LoggingData();
  return result;
}

}  // namespace

absl::StatusOr<TrainResult> Train(const TrainConfig& config, const TrainObserver& observer) {
  absl::StatusOr<std::vector<int64_t>> widths = nn::ParseMlpSpec(config.model);
  if (!widths.ok()) return widths.status();
  DDPKIT_RETURN_IF_ERROR(Validate(config));

  std::mutex mu;
  TrainResult lead_result;
  const cli::CommSetup setup{
      .backend = config.backend, .world_size = config.world_size, .options = config.comm_options};
  absl::Status status = cli::RunOnWorld(setup, [&](comm::ProcessGroup& group) -> absl::Status {
    DDPKIT_ASSIGN_OR_RETURN(TrainResult result, TrainOnRank(config, *widths, group, observer));
    if (group.rank() == 0 || config.backend != "threads") {
      std::lock_guard<std::mutex> lock(mu);
      lead_result = std::move(result);
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return lead_result;
}

}  // namespace ddpkit::tools
