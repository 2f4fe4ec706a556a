// SyncBatchNorm, as torch.nn.SyncBatchNorm and convert_sync_batchnorm: BatchNorm2d whose
// training statistics are the whole global batch's, every rank's shard together.
//
//   comm::ConvertSyncBatchNorm(*model, group);   // before DDP wraps the model, as in PyTorch
//   auto ddp = DistributedDataParallel::Create(model, group, options);
//
// Forward (training): each rank's per-channel sum, sum of squares and count go into ONE
// allreduce(SUM) of 2C+1 float64 values (PyTorch all_gathers each rank's mean, invstd and count
// instead and combines them; the global statistics are the same); the global mean and biased
// variance normalise, and running_mean/running_var move toward the global mean and the unbiased
// variance over the global count (momentum 0.1), as BatchNorm2d on one process over the global
// batch would. Backward: sum(dy) and sum(dy * xhat) per channel are allreduced (2C float64) and
// give the input gradient; the weight and bias gradients stay this rank's own (DDP averages
// them). Evaluation uses the running statistics and issues no collective; neither does a world
// of one rank (PyTorch falls back to BatchNorm there too). Ranks may hold different batch sizes.
//
// Its collectives are inside the model's forward and backward: Join cannot shadow them (a joined
// rank never runs the model), so uneven inputs need throw_on_early_termination (docs/join.md).
#pragma once

#include <cstdint>
#include <memory>

#include "autograd/nn/vision.h"
#include "comm/process_group.h"

namespace ddpkit::comm {

// The BatchNormSync that sums over `group` (float64 allreduce; skipped in a world of one). A
// failed or timed-out allreduce throws ddpkit::Error naming the statistics and this rank. The
// group must outlive every module and graph that uses it.
std::shared_ptr<BatchNormSync> MakeBatchNormSync(ProcessGroup& group);

// torch.nn.SyncBatchNorm(num_features, process_group=group): BatchNorm2d's parameters, buffers
// and names (state dicts move unchanged), synced over `group`.
class SyncBatchNorm : public nn::BatchNorm2d {
 public:
  SyncBatchNorm(int64_t num_features, ProcessGroup& group, DType dtype = DType::kFloat32);
};

// torch.nn.SyncBatchNorm.convert_sync_batchnorm(module, group): every BatchNorm2d in `module`
// becomes a SyncBatchNorm over `group`, keeping its parameters and buffers (the same tensors:
// ddpkit's models hold their layers by pointer, so the layers are converted in place rather than
// replaced). Returns how many were converted (0: the model has no BatchNorm).
int ConvertSyncBatchNorm(nn::Module& module, ProcessGroup& group);

}  // namespace ddpkit::comm
