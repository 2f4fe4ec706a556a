// Vocabulary shared by every process group: reduction ops, collective kinds, and the
// description of one collective call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/cuda/runtime.h"
#include "autograd/tensor.h"
#include "comm/collective_tag.h"

namespace ddpkit::comm {

enum class ReduceOp : uint8_t { kSum, kAvg, kMin, kMax };
enum class OpType : uint8_t {
  kAllreduce,
  kBroadcast,
  kAllgather,
  kAllgatherV,
  kReduceScatter,
  kAllToAllV,
  kBarrier
};

std::string_view ReduceOpName(ReduceOp op);  // "SUM", "AVG", ...
std::string_view OpTypeName(OpType op);      // "ALLREDUCE", "BROADCAST", ...
// The inverses (InvalidArgument for a name these do not print).
absl::StatusOr<ReduceOp> ParseReduceOp(std::string_view name);
absl::StatusOr<OpType> ParseOpType(std::string_view name);

// One collective as a rank issued it. Tensors are flat views of contiguous data; the handles
// keep the data alive until the collective completes.
struct Collective {
  OpType op = OpType::kBarrier;
  ReduceOp reduce_op = ReduceOp::kSum;
  Tensor input{};  // allreduce and broadcast work in place: input and output are the same
  Tensor output{};
  int root = 0;  // broadcast
  // Element counts per rank: allgather_v (every rank's contribution), reduce_scatter (every
  // rank's segment), all_to_all_v (what this rank sends to each peer).
  std::vector<int64_t> counts{};
  std::vector<int64_t> recv_counts{};  // all_to_all_v: what this rank receives from each peer
  uint64_t sequence_number = 0;
  CollectiveTag tag{};  // what the caller issued it for (ScopedCollectiveTag at the call)
  Device device{};      // where its tensors are (a barrier: the group's default device)
  // A GPU collective: recorded on the caller's current stream when it was issued, behind the
  // kernels that wrote the tensors; the communication waits on it, not on the host.
  std::shared_ptr<cuda::Event> ready{};
  // Host tensors for a GPU-only backend (nccl): they travel through c.device and back.
  bool host_staged = false;
};

// What every rank must agree on for a collective; exchanged at DDPKIT_DEBUG=DETAIL (always in
// the threads world) and compared by CheckCollectivesMatch.
struct CollectiveFingerprint {
  uint64_t sequence_number = 0;
  OpType op = OpType::kBarrier;
  ReduceOp reduce_op = ReduceOp::kSum;
  DType dtype = DType::kFloat32;
  int root = 0;
  int64_t input_numel = 0;
  int64_t output_numel = 0;
  std::vector<int64_t> counts;
  std::vector<int64_t> recv_counts;

  static CollectiveFingerprint Of(const Collective& c);
  // "ALLREDUCE(SUM, float32, 1024 elements)".
  std::string Describe() const;
  // Flat encoding for exchanging over a collective: a fixed header and 2*world counts.
  std::vector<int64_t> Encode(int world_size) const;
  static CollectiveFingerprint Decode(const int64_t* words, int world_size);
  static size_t EncodedSize(int world_size) { return 8 + 2 * static_cast<size_t>(world_size); }
};

// How rank b's call differs from rank a's ("different operations", "different roots", ...), or
// nullopt when they fit together: the same op and dtype, and what the op needs to agree (reduce
// op, root, element count, per-rank counts). An empty `counts` on both sides compares equal.
std::optional<std::string_view> CallDifference(const CollectiveFingerprint& a,
                                               const CollectiveFingerprint& b);

// OK when the ranks' calls fit together; otherwise FailedPrecondition naming the sequence
// number, the disagreeing ranks and what each called. Every rank computes the same verdict
// from the same fingerprints, so all fail together.
absl::Status CheckCollectivesMatch(const std::vector<CollectiveFingerprint>& per_rank);

// DETAIL over one allgather, for backends that have one: `gather(mine, all)` fills `all` with
// every rank's encoding (mine.size() words each, in rank order); then CheckCollectivesMatch.
// A failed gather comes back as "DETAIL check before sequence number N failed: ...".
using FingerprintGather =
    std::function<absl::Status(std::vector<int64_t>& mine, std::vector<int64_t>& all)>;
absl::Status CheckCollectivesMatchByAllgather(const Collective& c, int world_size,
                                              const FingerprintGather& gather);

}  // namespace ddpkit::comm
