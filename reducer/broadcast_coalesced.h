// DDP's broadcasts of whole models and of buffers, coalesced as PyTorch's
// dist._broadcast_coalesced does: the tensors are grouped by dtype into buckets of at most
// 250 MiB (DDP's broadcast_bucket_size) with the gradient buckets' own assignment, and each
// bucket goes out as one flat broadcast. A ResNet's 36 BatchNorm buffers are then two
// broadcasts per forward (float32 statistics, int64 counts), not 36.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "autograd/nn/nn.h"
#include "comm/process_group.h"

namespace ddpkit::reducer {

// PyTorch's DistributedDataParallel.broadcast_bucket_size.
inline constexpr size_t kBroadcastBucketBytes = size_t{250} * 1024 * 1024;

// Rank `root`'s values of `tensors` to every rank, in place. `kind` ("parameter", "buffer",
// "model") names them in an error, with the first tensor of the bucket that failed.
absl::Status BroadcastCoalesced(const NamedTensors& tensors, comm::ProcessGroup& group, int root,
                                std::string_view kind, size_t bucket_bytes = kBroadcastBucketBytes);

}  // namespace ddpkit::reducer
