// The `nccl` backend: one NCCL communicator per group, one GPU per rank (the engine PyTorch's
// DDP uses on GPUs). Tensors live on the group's own GPU; host tensors (DDP's small counts and
// flags) are copied through it by the base (Collective::host_staged), and other GPUs refused.
//
// Setup (comm/nccl/nccl_init.h): the ranks check through the Store that no two share a GPU,
// rank 0 publishes the ncclUniqueId, and the communicator is made nonblocking, so a rank that
// never comes fails the others within the timeout instead of hanging them.
//
// Each collective is only queued: Execute makes the group's communication stream (the base's,
// current while Execute runs) wait for the caller's `ready` event, then enqueues on it:
//
//   allreduce       ncclAllReduce in place (AVG: ncclAvg, NCCL divides in the reduction)
//   broadcast       ncclBroadcast in place
//   allgather       ncclAllGather
//   allgather_v     equal counts: ncclAllGather; uneven: ncclBroadcast from every rank into
//                   its segment, in one ncclGroupStart/End (as PyTorch's uneven allgather)
//   reduce_scatter  equal counts: ncclReduceScatter; uneven: ncclReduce of every segment to
//                   its owner, in one group (as PyTorch's uneven reduce_scatter)
//   all_to_all_v    ncclSend/ncclRecv to and from every peer (itself too), in one group
//   barrier         a one-element float32 ncclAllReduce on a buffer the group keeps
//
// The base's watchdog then waits for the GPU: AsyncError() is ncclCommGetAsyncError, and at
// the timeout AbortCommunication() is ncclCommAbort, which releases every rank's stuck kernels.
//
// Numerics: float16 and bfloat16 are reduced by NCCL in the dtype itself (every step of the
// ring rounds), where the gloo and threads backends add in float32 and round once; results can
// differ from theirs in the last bits.
//
// DDPKIT_DEBUG=DETAIL exchanges every collective's fingerprint through the Store (not over
// NCCL, so a mismatched call is reported instead of hanging the GPU); it adds a store round
// trip per rank and collective, for debugging only.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "autograd/device.h"
#include "comm/process_group.h"
#include "comm/store/store.h"

namespace ddpkit::comm {

// Why --backend nccl is refused in a build without CUDA.
inline constexpr char kNcclUnavailable[] =
    "--backend nccl: ddpkit was built without CUDA (configure with -DDDPKIT_CUDA=ON on a machine "
    "with the CUDA toolkit, cuDNN and NCCL, or CUDA_HOME pointing at them); use --backend gloo "
    "for several processes on the CPU, or --backend threads";

// Joins `size` ranks through `store` on `device` (a GPU of this process). Fails, on every rank
// alike, when two ranks use one GPU, and within options.timeout when a rank does not come.
// Defined only in a CUDA build: call it under `if constexpr (kWithCuda)`.
absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateNcclProcessGroup(
    int rank, int size, std::shared_ptr<Store> store, Device device,
    ProcessGroupOptions options = {});

}  // namespace ddpkit::comm
