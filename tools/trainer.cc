#include "tools/trainer.h"

#include <algorithm>
#include <chrono>

#include "autograd/grad_mode.h"
#include "autograd/nn.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "autograd/safetensors.h"
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

}  // namespace

absl::StatusOr<TrainReport> Train(const TrainConfig& config, const TrainObserver& observer) {
  absl::StatusOr<std::vector<int64_t>> widths = nn::ParseMlpSpec(config.model);
  if (!widths.ok()) return widths.status();
  if (config.batch_size <= 0) {
    return absl::InvalidArgumentError(StrCat("--batch-size must be positive, got ", config.batch_size));
  }
  if (config.steps < 0) {
    return absl::InvalidArgumentError(StrCat("--steps must be >= 0, got ", config.steps));
  }
  if (config.lr < 0) return absl::InvalidArgumentError(StrCat("--lr must be >= 0, got ", config.lr));
  const int64_t features = widths->front(), classes = widths->back();

  auto model = nn::MakeMlp(*widths, config.seed);
  if (!config.weights_path.empty()) {
    DDPKIT_RETURN_IF_ERROR(LoadStateDict(*model, config.weights_path));
  }
  ClassificationData data;
  if (config.data_path.empty()) {
    data = MakeSyntheticClassification(config.synthetic_rows, features, classes, config.seed + 1);
  } else {
    DDPKIT_ASSIGN_OR_RETURN(data, LoadClassificationData(config.data_path, features, classes));
  }

  TrainReport report;
  report.set_model(config.model);
  for (const auto& [name, p] : model->NamedParameters()) {
    report.add_parameter_names(name);
    report.set_num_parameters(report.num_parameters() + static_cast<int32_t>(p.numel()));
  }
  report.set_data(data.description);
  report.set_world_size(1);
  report.set_batch_size(config.batch_size);
  report.set_steps(config.steps);
  report.set_lr(config.lr);
  report.set_momentum(config.momentum);
  report.set_seed(static_cast<int32_t>(config.seed));

  if (observer.on_start) observer.on_start(report);

  Sgd optimizer(model->Parameters(), {.lr = config.lr, .momentum = config.momentum});
  Tensor x = Tensor::Empty({config.batch_size, features});
  Tensor y = Tensor::Empty({config.batch_size}, DType::kInt64);
  std::vector<double> step_ms;
  for (int step = 0; step < config.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    GatherRows(data, static_cast<int64_t>(step) * config.batch_size, config.batch_size, x, y);
    optimizer.ZeroGrad();
    Tensor loss = CrossEntropy(model->Forward(x), y);
    loss.Backward();
    optimizer.Step();
    step_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    report.add_losses(loss.item());
    if (observer.on_step) observer.on_step({step + 1, config.steps, loss.item(), step_ms.back()});
  }

  report.set_final_accuracy(Accuracy(*model, data));
  if (!step_ms.empty()) {
    std::nth_element(step_ms.begin(), step_ms.begin() + step_ms.size() / 2, step_ms.end());
    report.set_median_step_ms(step_ms[step_ms.size() / 2]);
  }
  if (!config.save_weights_path.empty()) {
    DDPKIT_RETURN_IF_ERROR(SaveStateDict(*model, config.save_weights_path));
  }
  return report;
}

}  // namespace ddpkit::tools
