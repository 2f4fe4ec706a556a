// What the DDP training jobs (`ddpkit train`, `ddpkit join`) share: their options, and the
// pieces each rank builds before its loop — the model, DDP around it, the optimizer — and the
// accuracy it reports after.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/nn/models/zoo.h"
#include "autograd/nn/nn.h"
#include "autograd/nn/optim.h"
#include "reducer/distributed_data_parallel.h"
#include "reducer/extras/powersgd_hook.h"
#include "reducer/extras/zero_redundancy_optimizer.h"
#include "tools/jobs/dataset.h"
#include "tools/jobs/job.h"

namespace ddpkit::jobs {

struct DdpTrainingConfig {
  comm::WorldSpec world;  // --backend, --world-size, --timeout, --threads-per-rank, ...
  std::string model = "mlp:32,64,64,10";  // any spec of the model zoo (autograd/nn/models/zoo.h)
  std::string weights_path;               // initial weights (safetensors) when set
  std::string save_weights_path;          // rank 0's final weights (atomically) when set
  int batch_size = 32;                    // rows per rank per (micro-)batch
  double lr = 0.1;
  double momentum = 0.0;
  std::string optimizer = "sgd";  // or "zero-sgd": ZeRO-1, each rank steps its shard
  std::string loss = "ce";        // ce, mse or sum (see TrainingLoss)
  uint64_t seed = 0;              // the model's initialisation and the synthetic data
  reducer::DdpOptions ddp;
  std::string comm_hook;              // empty, allreduce, fp16, bf16, powersgd or batched_powersgd
  reducer::PowerSgdOptions powersgd;  // for the PowerSGD hooks
  std::string trace_path;             // a Chrome trace of the run (tools/trace/) when set
  // Every BatchNorm2d becomes a SyncBatchNorm over the group before DDP wraps the model
  // (comm/ops/sync_batch_norm.h); refused for a model without BatchNorm.
  bool sync_batchnorm = false;
  // Where the model computes. With nccl, a GPU config means the rank's own GPU (the group's).
  Device device = Device::Cpu();
};

// The parsed model spec; InvalidArgument for a bad model spec, batch size, learning rate,
// optimizer, loss or comm hook, or --sync-batchnorm on a model without BatchNorm.
absl::StatusOr<models::ModelSpec> ValidateDdpTraining(const DdpTrainingConfig& config);

// --- Bounds: a size a user typed that cannot run is refused at once, before any allocation --

// Iterations a job may run: its report keeps a few numbers per step.
inline constexpr int64_t kMaxSteps = 10'000'000;

// Bytes one rank of a DDP job holds, roughly: the parameters four times over (weights,
// gradients, bucket buffers, momentum), each layer's activations and their gradients for a
// micro-batch, and `data_bytes` of data. In double: the inputs may be absurd.
double EstimateRankBytes(const models::ModelSpec& model, int64_t batch_size, double data_bytes);
double EstimateRankBytes(const std::vector<int64_t>& widths, int64_t batch_size, double data_bytes);

// OK when `ranks_here` ranks of `bytes_per_rank` fit in this machine's available memory
// (MemAvailable); otherwise InvalidArgument saying how much is needed, how much there is, and
// which flags set it.
absl::Status CheckFitsInMemory(double bytes_per_rank, int ranks_here, std::string_view flags);

// The model of the config's spec (widths and options), initialised from the seed, then from the
// weights file when one is set.
absl::StatusOr<std::shared_ptr<nn::Module>> BuildModel(const DdpTrainingConfig& config);

// The rank's device: `requested`, except that a GPU request on a GPU backend (nccl) means the
// group's own GPU (cuda:LOCAL_RANK).
Device RankDevice(Device requested, const comm::ProcessGroup& group);
// DDP around `model` with the config's options and comm hook, its BatchNorms converted to
// SyncBatchNorm first when the config says so (collective: every rank calls it).
absl::StatusOr<std::shared_ptr<reducer::DistributedDataParallel>> WrapInDdp(
    const DdpTrainingConfig& config, std::shared_ptr<nn::Module> model, comm::ProcessGroup& group);

// This rank's optimizer: plain SGD, or ZeRO-1 SGD stepping this rank's shard.
struct RankOptimizer {
  std::unique_ptr<Optimizer> optimizer;
  reducer::ZeroRedundancyOptimizer* zero = nullptr;  // the same object, for zero-sgd
  int64_t elements_stepped = 0;                      // parameter elements this rank steps
};
absl::StatusOr<RankOptimizer> MakeOptimizer(const DdpTrainingConfig& config,
                                            const nn::Module& model, comm::ProcessGroup& group);

// The loss `name` of the model's output [rows, classes] against the labels [rows] (a language
// model's [rows, T, classes] against [rows, T] is taken as rows·T rows, so "ce" is the mean
// over every position, as nanoGPT's): "ce"
// (F.cross_entropy(out, y)), "mse" (F.mse_loss(out, F.one_hot(y, classes).float())) or "sum"
// (out.sum(), as PyTorch's own DDP tests use; DDP averages gradients over ranks, so with it a
// run of N ranks steps with 1/N of one process's gradient on the same global batch).
Tensor TrainingLoss(const std::string& name, const Tensor& out, const Tensor& labels);

// Top-1 accuracy of `model` over every row of `data` (every position of a language model's
// rows); 0 for no rows.
double Accuracy(nn::Module& model, const ClassificationData& data);

// FNV-1a over the parameters' bytes (kept positive, so an allreduce MAX of (h, -h) tells
// whether every rank holds the same model).
int64_t ModelHash(const nn::Module& model);
// Collective: whether every rank of `group` holds bit-identical parameters.
absl::StatusOr<bool> ModelsIdentical(const nn::Module& model, comm::ProcessGroup& group);

// Elements over all of the model's parameter tensors.
int64_t ParameterElements(const nn::Module& model);

}  // namespace ddpkit::jobs
