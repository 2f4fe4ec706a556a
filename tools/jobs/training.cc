#include "tools/jobs/training.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "autograd/safetensors.h"

namespace ddpkit::jobs {

absl::StatusOr<std::vector<int64_t>> ValidateDdpTraining(const DdpTrainingConfig& config) {
  DDPKIT_ASSIGN_OR_RETURN(std::vector<int64_t> widths, nn::ParseMlpSpec(config.model));
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--batch-size", config.batch_size));
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--lr", config.lr, 0));
  DDPKIT_RETURN_IF_ERROR(RequireOneOf("--optimizer", config.optimizer, {"sgd", "zero-sgd"}));
  if (!config.comm_hook.empty()) {
    DDPKIT_RETURN_IF_ERROR(reducer::ParseBuiltinCommHook(config.comm_hook).status());
  }
  return widths;
}

absl::StatusOr<std::shared_ptr<nn::Module>> BuildModel(const DdpTrainingConfig& config,
                                                       const std::vector<int64_t>& widths) {
  std::shared_ptr<nn::Module> model = nn::MakeMlp(widths, config.seed);
  if (!config.weights_path.empty()) {
    DDPKIT_RETURN_IF_ERROR(LoadStateDict(*model, config.weights_path));
  }
  return model;
}

absl::StatusOr<std::shared_ptr<reducer::DistributedDataParallel>> WrapInDdp(
    const DdpTrainingConfig& config, std::shared_ptr<nn::Module> model, comm::ProcessGroup& group) {
  DDPKIT_ASSIGN_OR_RETURN(std::shared_ptr<reducer::DistributedDataParallel> ddp,
                          reducer::DistributedDataParallel::Create(model, group, config.ddp));
  if (!config.comm_hook.empty()) {
    DDPKIT_ASSIGN_OR_RETURN(reducer::BuiltinCommHook hook,
                            reducer::ParseBuiltinCommHook(config.comm_hook));
    ddp->RegisterBuiltinCommHook(hook);
  }
  return ddp;
}

absl::StatusOr<RankOptimizer> MakeOptimizer(const DdpTrainingConfig& config,
                                            const nn::Module& model, comm::ProcessGroup& group) {
  const SgdOptions sgd{.lr = config.lr, .momentum = config.momentum};
  RankOptimizer made;
  if (config.optimizer == "zero-sgd") {
    DDPKIT_ASSIGN_OR_RETURN(std::unique_ptr<reducer::ZeroRedundancyOptimizer> zero,
                            reducer::ZeroRedundancyOptimizer::Create(model.NamedParameters(), group,
                                                                     reducer::MakeSgdFactory(sgd)));
    made.zero = zero.get();
    made.elements_stepped = zero->shard_elements();
    made.optimizer = std::move(zero);
  } else {
    made.optimizer = std::make_unique<Sgd>(model.Parameters(), sgd);
    made.elements_stepped = ParameterElements(model);
  }
  return made;
}

double Accuracy(nn::Module& model, const ClassificationData& data) {
  if (data.rows() == 0) return 0;
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

int64_t ParameterElements(const nn::Module& model) {
  int64_t n = 0;
  for (const Tensor& p : model.Parameters()) n += p.numel();
  return n;
}

}  // namespace ddpkit::jobs
