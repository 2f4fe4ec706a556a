#include "tools/jobs/training.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_format.h"
#include "autograd/cuda/runtime.h"
#include "autograd/grad_mode.h"
#include "autograd/nn/safetensors.h"
#include "autograd/ops.h"
#include "comm/ops/sync_batch_norm.h"
#include "reducer/extras/named_comm_hook.h"

namespace ddpkit::jobs {

absl::StatusOr<models::ModelSpec> ValidateDdpTraining(const DdpTrainingConfig& config) {
  DDPKIT_ASSIGN_OR_RETURN(models::ModelSpec spec, models::ParseModel(config.model));
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--batch-size", config.batch_size));
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--lr", config.lr, 0));
  DDPKIT_RETURN_IF_ERROR(RequireOneOf("--optimizer", config.optimizer, {"sgd", "zero-sgd"}));
  DDPKIT_RETURN_IF_ERROR(RequireOneOf("--loss", config.loss, {"ce", "mse", "sum"}));
  if (!config.comm_hook.empty()) {
    DDPKIT_RETURN_IF_ERROR(reducer::ValidateCommHookName(config.comm_hook));
  }
  if (reducer::IsPowerSgdHookName(config.comm_hook)) {
    DDPKIT_RETURN_IF_ERROR(reducer::ValidatePowerSgdOptions(config.powersgd));
  }
  if (config.sync_batchnorm && spec.family != "resnet") {
    return absl::InvalidArgumentError(
        StrCat("--sync-batchnorm: the model ", config.model,
               " has no BatchNorm layer to synchronise; SyncBatchNorm converts the BatchNorm2d "
               "layers of a resnet:... model"));
  }
  if (config.sync_batchnorm && config.device.is_cuda()) {
    return absl::InvalidArgumentError(
        StrCat("--sync-batchnorm runs on the host only (its cross-rank sums have no GPU path "
               "yet); use --device cpu, or drop --sync-batchnorm to train BatchNorm2d on ",
               config.device.ToString()));
  }
  if (config.loss == "mse" && spec.io.per_position) {
    return absl::InvalidArgumentError(
        StrCat("--loss mse: the model ", config.model,
               " predicts a token at every position; use --loss ce (or sum)"));
  }
  return spec;
}

double EstimateRankBytes(const models::ModelSpec& model, int64_t batch_size, double data_bytes) {
  const double kFloat = 4;
  return kFloat * (4 * model.parameter_elements +
                   2 * model.activation_elements_per_row * static_cast<double>(batch_size)) +
         data_bytes;
}

double EstimateRankBytes(const std::vector<int64_t>& widths, int64_t batch_size,
                         double data_bytes) {
  double parameters = 0, activations = 0;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    parameters += static_cast<double>(widths[l]) * static_cast<double>(widths[l + 1]) +
                  static_cast<double>(widths[l + 1]);
    activations += 2.0 * static_cast<double>(widths[l + 1]);  // Linear's output, then ReLU's
  }
  activations += static_cast<double>(widths.front());
  const double kFloat = 4;
  return kFloat * (4 * parameters + 2 * activations * static_cast<double>(batch_size)) + data_bytes;
}

namespace {

// MemAvailable from /proc/meminfo, in bytes (0 when unknown).
double AvailableMemory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string name;
  double kib = 0;
  std::string unit;
  while (meminfo >> name >> kib >> unit) {
    if (name == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

std::string GiB(double bytes) { return absl::StrFormat("%.1f GiB", bytes / (1 << 30)); }

}  // namespace

absl::Status CheckFitsInMemory(double bytes_per_rank, int ranks_here, std::string_view flags) {
  const double needed = bytes_per_rank * ranks_here;
  const double available = AvailableMemory();
  if (available <= 0 || needed <= available) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(
      flags, " need about ", GiB(needed),
      ranks_here > 1
          ? StrCat(" (", GiB(bytes_per_rank), " per rank, ", ranks_here, " ranks in this process)")
          : "",
      " but this machine has ", GiB(available),
      " available; use a smaller model, batch or dataset, or fewer ranks in this process"));
}

absl::StatusOr<std::shared_ptr<nn::Module>> BuildModel(const DdpTrainingConfig& config) {
  DDPKIT_ASSIGN_OR_RETURN(const models::ModelSpec spec, models::ParseModel(config.model));
  std::shared_ptr<nn::Module> model = models::MakeModel(spec, config.seed);
  if (!config.weights_path.empty()) {
    DDPKIT_RETURN_IF_ERROR(LoadStateDict(*model, config.weights_path));
  }
  if (config.device.is_cuda()) {
    DDPKIT_RETURN_IF_ERROR(cuda::CheckUsable(config.device));
    model->To(config.device);  // initialised on the host, so a GPU run starts from the same
  }
  return model;
}

Device RankDevice(Device requested, const comm::ProcessGroup& group) {
  return requested.is_cuda() && group.DefaultDevice().is_cuda() ? group.DefaultDevice() : requested;
}

absl::StatusOr<std::shared_ptr<reducer::DistributedDataParallel>> WrapInDdp(
    const DdpTrainingConfig& config, std::shared_ptr<nn::Module> model, comm::ProcessGroup& group) {
  if (config.sync_batchnorm && comm::ConvertSyncBatchNorm(*model, group) == 0) {
    return absl::InvalidArgumentError("--sync-batchnorm: the model has no BatchNorm2d layer");
  }
  DDPKIT_ASSIGN_OR_RETURN(std::shared_ptr<reducer::DistributedDataParallel> ddp,
                          reducer::DistributedDataParallel::Create(model, group, config.ddp));
  if (!config.comm_hook.empty()) {
    DDPKIT_RETURN_IF_ERROR(reducer::RegisterNamedCommHook(*ddp, config.comm_hook, config.powersgd));
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

namespace {

// F.one_hot(labels, classes).float(), on the labels' device.
Tensor OneHot(const Tensor& labels, int64_t classes) {
  const Tensor host = labels.To(Device::Cpu());
  Tensor hot = Tensor::Zeros({host.numel(), classes});
  for (int64_t r = 0; r < host.numel(); ++r) {
    hot.data<float>()[r * classes + host.data<int64_t>()[r]] = 1;
  }
  return hot.To(labels.device());
}

}  // namespace

Tensor TrainingLoss(const std::string& name, const Tensor& out, const Tensor& labels) {
  if (out.dim() == 3) {  // [rows, T, classes]: every position a row
    return TrainingLoss(name, Reshape(out, {out.size(0) * out.size(1), out.size(2)}),
                        labels.View({labels.numel()}));
  }
  if (name == "mse") return Mse(out, OneHot(labels, out.size(1)));
  if (name == "sum") return Sum(out);
  return CrossEntropy(out, labels);
}

double Accuracy(nn::Module& model, const ClassificationData& data) {
  if (data.rows() == 0) return 0;
  NoGradGuard no_grad;
  // In eval mode, as PyTorch users evaluate: BatchNorm uses (and leaves) its running statistics.
  const bool was_training = model.is_training();
  model.Eval();
  const TensorList parameters = model.Parameters();
  const Device device = parameters.empty() ? Device::Cpu() : parameters.front().device();
  constexpr int64_t kChunk = 256;  // rows per forward: a large dataset's activations stay small
  int64_t correct = 0;
  for (int64_t begin = 0; begin < data.rows(); begin += kChunk) {
    const int64_t end = std::min(data.rows(), begin + kChunk);
    Tensor logits = model.Forward(data.x.Rows(begin, end).To(device)).To(Device::Cpu());
    const int64_t classes = logits.size(logits.dim() - 1);
    const int64_t* labels = data.y.Rows(begin, end).data<int64_t>();
    for (int64_t r = 0; r < logits.numel() / classes; ++r) {
      const float* row = logits.data<float>() + r * classes;
      correct += (std::max_element(row, row + classes) - row) == labels[r];
    }
  }
  model.Train(was_training);
  return static_cast<double>(correct) / static_cast<double>(data.y.numel());
}

int64_t ModelHash(const nn::Module& model) {
  uint64_t h = 1469598103934665603ull;
  for (const Tensor& parameter : model.Parameters()) {
    const Tensor p = parameter.is_cuda() ? parameter.To(Device::Cpu()) : parameter;
    const auto* bytes = static_cast<const unsigned char*>(p.raw_data());
    for (size_t i = 0; i < p.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 2);
}

absl::StatusOr<bool> ModelsIdentical(const nn::Module& model, comm::ProcessGroup& group) {
  const int64_t hash = ModelHash(model);
  Tensor hashes = Tensor::FromVector<int64_t>({hash, -hash}, {2});
  DDPKIT_RETURN_IF_ERROR(
      WaitFor(group.Allreduce(hashes, comm::ReduceOp::kMax), "comparing the final models"));
  return hashes.data<int64_t>()[0] == -hashes.data<int64_t>()[1];
}

int64_t ParameterElements(const nn::Module& model) {
  int64_t n = 0;
  for (const Tensor& p : model.Parameters()) n += p.numel();
  return n;
}

}  // namespace ddpkit::jobs
