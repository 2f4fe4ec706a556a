#include "comm/nccl/process_group_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "autograd/base/log.h"
#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/runtime.h"
#include "comm/nccl/nccl_init.h"
#include "comm/nccl/nccl_util.h"

namespace ddpkit::comm {
namespace {

using nccl::AwaitNonblocking;
using nccl::NcclErrorText;
using nccl::ToNcclOp;
using nccl::ToNcclType;

// Element `offset` of a flat tensor's data, as NCCL takes buffers.
char* At(const Tensor& t, int64_t offset) {
  return static_cast<char*>(t.raw_data()) + offset * static_cast<int64_t>(ElementSize(t.dtype()));
}

bool AllEqual(const std::vector<int64_t>& counts) {
  return std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) == counts.end();
}

// Runs `body` (NCCL calls) between ncclGroupStart and ncclGroupEnd; the first error wins, and
// the group is always closed.
template <typename Body>
ncclResult_t Grouped(Body body) {
  if (ncclResult_t start = ncclGroupStart(); start != ncclSuccess) return start;
  const ncclResult_t result = body();
  const ncclResult_t end = ncclGroupEnd();
  return result != ncclSuccess ? result : end;
}

// In one NCCL group, `per_segment(r, offset)` for every rank r whose segment of `counts` is not
// empty (offset: where r's segment starts); the first error wins.
template <typename PerSegment>
ncclResult_t GroupedPerSegment(const std::vector<int64_t>& counts, PerSegment per_segment) {
  return Grouped([&] {
    int64_t offset = 0;
    for (int r = 0; r < static_cast<int>(counts.size()); ++r) {
      if (counts[r] > 0) {
        if (ncclResult_t s = per_segment(r, offset); s != ncclSuccess) return s;
      }
      offset += counts[r];
    }
    return ncclSuccess;
  });
}

class ProcessGroupNccl final : public ProcessGroup {
 public:
  ProcessGroupNccl(int rank, int size, nccl::Communicator comm, Device device,
                   std::shared_ptr<Store> store, float* barrier_buffer, ProcessGroupOptions options)
      : ProcessGroup(rank, size, options),
        comm_(comm.comm),
        store_prefix_(std::move(comm.store_prefix)),
        device_(device),
        store_(std::move(store)),
        barrier_buffer_(barrier_buffer) {
    StartCommThread();
  }

  ~ProcessGroupNccl() override {
    StopCommThread();  // first: queued collectives finish (or fail) before the comm goes
    ReleaseCommunicator();
    cuda::DeviceScope scope(device_);
    cudaFree(barrier_buffer_);
  }

  std::string_view backend_name() const override { return BackendName(Backend::kNccl); }
  bool SupportsDevice(Device device) const override { return device == device_; }
  Device DefaultDevice() const override { return device_; }

 private:
  absl::Status Execute(const Collective& c) override {
    cuda::DeviceScope scope(device_);
    const cuda::Stream stream = cuda::CurrentStream(device_);  // the base's comm stream
    if (c.ready) c.ready->Block(stream);  // after the kernels that wrote the tensors
    const ncclResult_t queued = Enqueue(c, stream);
    absl::Status status = AwaitNonblocking(comm_, queued, absl::Now() + options().timeout,
                                           StrCat("rank ", rank(), " queueing it"));
    if (status.ok()) return status;
    AbortCommunication();  // a half-queued collective leaves the communicator unusable
    return absl::Status(status.code(), StrCat(Describe(c), " failed: ", status.message()));
  }

  ncclResult_t Enqueue(const Collective& c, cudaStream_t stream) {
    const int64_t n = c.input.defined() ? c.input.numel() : 0;
    switch (c.op) {
      case OpType::kAllreduce:
        if (n == 0) return ncclSuccess;
        return ncclAllReduce(c.output.raw_data(), c.output.raw_data(), n,
                             ToNcclType(c.output.dtype()), ToNcclOp(c.reduce_op), comm_, stream);
      case OpType::kBroadcast:
        if (n == 0) return ncclSuccess;
        return ncclBroadcast(c.output.raw_data(), c.output.raw_data(), n,
                             ToNcclType(c.output.dtype()), c.root, comm_, stream);
      case OpType::kAllgather:
        if (n == 0) return ncclSuccess;
        return ncclAllGather(c.input.raw_data(), c.output.raw_data(), n,
                             ToNcclType(c.input.dtype()), comm_, stream);
      case OpType::kAllgatherV: return AllgatherV(c, stream);
      case OpType::kReduceScatter: return ReduceScatter(c, stream);
      case OpType::kAllToAllV: return AllToAllV(c, stream);
      case OpType::kBarrier:
        return ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclFloat32, ncclSum, comm_,
                             stream);
    }
    throw Error(StrCat("[nccl] unexpected op ", OpTypeName(c.op)));
  }

  // Uneven counts: every rank broadcasts its input into its own segment of everyone's output
  // (a non-root's send buffer is unused by NCCL, so it passes none).
  ncclResult_t AllgatherV(const Collective& c, cudaStream_t stream) {
    const ncclDataType_t type = ToNcclType(c.input.dtype());
    if (AllEqual(c.counts)) {
      if (c.counts[0] == 0) return ncclSuccess;
      return ncclAllGather(c.input.raw_data(), c.output.raw_data(), c.counts[0], type, comm_,
                           stream);
    }
    return GroupedPerSegment(c.counts, [&](int r, int64_t offset) {
      const void* send = r == rank() ? c.input.raw_data() : nullptr;
      return ncclBroadcast(send, At(c.output, offset), c.counts[r], type, r, comm_, stream);
    });
  }

  // Uneven counts: every segment is reduced to the rank that owns it (a non-root's receive
  // buffer is unused by NCCL, so it passes none).
  ncclResult_t ReduceScatter(const Collective& c, cudaStream_t stream) {
    const ncclDataType_t type = ToNcclType(c.input.dtype());
    const ncclRedOp_t op = ToNcclOp(c.reduce_op);
    if (AllEqual(c.counts)) {
      if (c.counts[0] == 0) return ncclSuccess;
      return ncclReduceScatter(c.input.raw_data(), c.output.raw_data(), c.counts[0], type, op,
                               comm_, stream);
    }
    return GroupedPerSegment(c.counts, [&](int r, int64_t offset) {
      void* receive = r == rank() ? c.output.raw_data() : nullptr;
      return ncclReduce(At(c.input, offset), receive, c.counts[r], type, op, r, comm_, stream);
    });
  }

  // A send to and a receive from every peer (this rank too: NCCL copies that one locally).
  ncclResult_t AllToAllV(const Collective& c, cudaStream_t stream) {
    const ncclDataType_t type = ToNcclType(c.input.dtype());
    return Grouped([&] {
      int64_t send_offset = 0, recv_offset = 0;
      for (int peer = 0; peer < size(); ++peer) {
        const int64_t send = c.counts[peer], recv = c.recv_counts[peer];
        ncclResult_t s = ncclSuccess;
        if (send > 0) s = ncclSend(At(c.input, send_offset), send, type, peer, comm_, stream);
        if (s == ncclSuccess && recv > 0) {
          s = ncclRecv(At(c.output, recv_offset), recv, type, peer, comm_, stream);
        }
        if (s != ncclSuccess) return s;
        send_offset += send;
        recv_offset += recv;
      }
      return ncclSuccess;
    });
  }

  absl::Status AsyncError() override {
    if (aborted_.load()) return absl::AbortedError("the NCCL communicator was aborted");
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(comm_, &state); r != ncclSuccess) state = r;
    if (state == ncclSuccess || state == ncclInProgress) return absl::OkStatus();
    return absl::UnavailableError(
        NcclErrorText(StrCat("NCCL reported an error on rank ", rank()), state, comm_));
  }

  // Ends every kernel of this communicator, on this rank; peers stuck on it time out or see
  // the error themselves. Once only: the communicator is gone afterwards.
  void AbortCommunication() override {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_.load()) return;
    aborted_.store(true);
    ncclCommAbort(comm_);
  }

  // A healthy communicator is finalized (its work flushed) and destroyed; a broken one, or one
  // whose finalize does not finish within the timeout, is aborted.
  void ReleaseCommunicator() {
    if (aborted_.load()) return;
    if (!AsyncError().ok()) return AbortCommunication();
    const ncclResult_t r = ncclCommFinalize(comm_);
    absl::Status flushed =
        AwaitNonblocking(comm_, r, absl::Now() + options().timeout, "ncclCommFinalize");
    if (!flushed.ok()) {
      Log(LogLevel::kWarning, StrCat("rank ", rank(), ": ", flushed.message(), "; aborting"));
      return AbortCommunication();
    }
    ncclCommDestroy(comm_);
  }

  absl::Status VerifyCallsMatch(const Collective& c) override;

  ncclComm_t comm_;
  const std::string store_prefix_;
  const Device device_;
  std::shared_ptr<Store> store_;
  float* barrier_buffer_;  // one float on device_, zero: what a barrier reduces
  std::mutex abort_mu_;
  std::atomic<bool> aborted_{false};
};

// Every rank's fingerprint through the store, under the group's prefix and the sequence
// number; a rank that does not post its own within the timeout is named.
absl::Status ProcessGroupNccl::VerifyCallsMatch(const Collective& c) {
  const CollectiveFingerprint mine = CollectiveFingerprint::Of(c);
  const std::vector<int64_t> words = mine.Encode(size());
  const std::string key = StrCat(store_prefix_, "detail/", c.sequence_number, "/");
  DDPKIT_RETURN_IF_ERROR(store_->Set(
      key + std::to_string(rank()),
      std::string(reinterpret_cast<const char*>(words.data()), words.size() * sizeof(int64_t))));
  const absl::Time deadline = absl::Now() + options().timeout;
  std::vector<CollectiveFingerprint> prints;
  for (int r = 0; r < size(); ++r) {
    absl::StatusOr<std::string> theirs = store_->Get(
        key + std::to_string(r), std::max(deadline - absl::Now(), absl::Milliseconds(1)));
    if (!theirs.ok()) {
      return absl::DeadlineExceededError(
          StrCat("DETAIL check before ", Describe(c), ": rank ", r, " did not issue it within ",
                 absl::FormatDuration(options().timeout), ": ", theirs.status().message()));
    }
    if (theirs->size() != words.size() * sizeof(int64_t)) {
      return absl::DataLossError(StrCat("DETAIL check before ", Describe(c), ": rank ", r,
                                        "'s fingerprint has ", theirs->size(), " bytes"));
    }
    std::vector<int64_t> decoded(words.size());
    std::memcpy(decoded.data(), theirs->data(), theirs->size());
    prints.push_back(CollectiveFingerprint::Decode(decoded.data(), size()));
  }
  return CheckCollectivesMatch(prints);
}

absl::StatusOr<float*> AllocateBarrierBuffer(Device device) {
  cuda::DeviceScope scope(device);
  void* buffer = nullptr;
  cudaError_t s = cudaMalloc(&buffer, sizeof(float));
  if (s == cudaSuccess) s = cudaMemset(buffer, 0, sizeof(float));
  if (s != cudaSuccess) {
    cudaGetLastError();
    cudaFree(buffer);
    return absl::ResourceExhaustedError(StrCat("nccl: cannot allocate the barrier buffer on ",
                                               device.ToString(), ": ", cudaGetErrorString(s)));
  }
  return static_cast<float*>(buffer);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateNcclProcessGroup(int rank, int size,
                                                                     std::shared_ptr<Store> store,
                                                                     Device device,
                                                                     ProcessGroupOptions options) {
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(
        StrCat("nccl: rank ", rank, " was given ", device.ToString(),
               "; the nccl backend runs on a GPU (cuda:N); use --backend gloo for the CPU"));
  }
  DDPKIT_ASSIGN_OR_RETURN(nccl::Communicator comm,
                          nccl::InitCommunicator(rank, size, *store, device, options.timeout));
  absl::StatusOr<float*> barrier_buffer = AllocateBarrierBuffer(device);
  if (!barrier_buffer.ok()) {
    ncclCommAbort(comm.comm);
    return barrier_buffer.status();
  }
  return std::unique_ptr<ProcessGroup>(new ProcessGroupNccl(
      rank, size, std::move(comm), device, std::move(store), *barrier_buffer, options));
}

}  // namespace ddpkit::comm
