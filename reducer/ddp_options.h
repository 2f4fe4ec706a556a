// DistributedDataParallel's options, the one check of them that the library, the command line
// and plan files share, and the bucket caps they come to under the chosen PyTorch's rules.
//
// A cap the user gave and one left at its default are told apart (std::optional), because since
// PyTorch 2.4 they plan differently: a given bucket_cap_mb — even 25 — caps the first bucket too,
// while an unset one keeps the small 1 MiB first bucket.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "autograd/dtype.h"
#include "reducer/bucket_assignment.h"
#include "reducer/pytorch_version.h"

namespace ddpkit::reducer {

inline constexpr double kDefaultBucketCapMb = 25;   // PyTorch's _DEFAULT_BUCKET_CAP_MB
inline constexpr double kDefaultFirstBucketMb = 1;  // dist._DEFAULT_FIRST_BUCKET_BYTES, in MiB

// PyTorch 2.1's mixed_precision=_MixedPrecision(param_dtype, reduce_dtype, buffer_dtype), as far
// as ddpkit's ops reach: they compute in float32 and float64 only, so param_dtype must be the
// parameters' own and buffer_dtype unset (PyTorch would cast every buffer, integer ones too).
// What is reproduced bit for bit is the reduction: each bucket cast to reduce_dtype, summed,
// and only then divided by the world size (PyTorch's _reducer_allreduce_and_upcast_hook).
struct MixedPrecision {
  DType param_dtype = DType::kFloat32;
  std::optional<DType> reduce_dtype{};  // unset: param_dtype
  std::optional<DType> buffer_dtype{};
  DType Reduce() const { return reduce_dtype.value_or(param_dtype); }
};

struct DdpOptions {
  PyTorchVersion pytorch_version = kDefaultPyTorch;  // whose DDP rules to follow
  // PyTorch's bucket_cap_mb; unset: 25 MiB, and (from 2.4) the first bucket keeps its own cap.
  std::optional<double> bucket_cap_mb{};
  // 2.11's bucket_cap_mb_list: bucket i's cap, the last one repeating, for the first
  // iteration's plan and the rebuild alike; bucket_cap_mb is then ignored.
  std::vector<double> bucket_cap_mb_list{};
  // The first bucket's cap after the rebuild: PyTorch's module attribute
  // dist._DEFAULT_FIRST_BUCKET_BYTES (in MiB here). From 2.4 it applies only while bucket_cap_mb
  // is unset, so giving both is refused there.
  std::optional<double> first_bucket_mb{};
  bool find_unused_parameters = false;   // search the graph for parameters the forward skipped
  bool static_graph = false;             // the graph is the same every iteration
  bool gradient_as_bucket_view = false;  // .grad tensors are views into the bucket buffers
  // Rank 0's buffers to all at every synced forward; false also keeps them out of the
  // construction broadcast and Join's final sync from PyTorch 2.1 (1.13 sent them there always).
  bool broadcast_buffers = true;
  // 2.13's forward_sync_buffers: when given it decides the per-forward sync in place of
  // broadcast_buffers, and the buffers are sent at construction whatever it says.
  std::optional<bool> forward_sync_buffers{};
  // 2.8's init_sync: false skips construction's model check and broadcast (no collective).
  bool init_sync = true;
  // 2.8's skip_all_reduce_unused_params: a bucket whose every parameter this rank left unused
  // (find_unused_parameters' search, or static graph's record) is not reduced; its gradients
  // are left as they were. Every rank must leave the same ones unused (checked: ddpkit names the
  // ranks that disagree where PyTorch's collectives would pair up wrongly).
  bool skip_all_reduce_unused_params = false;
  // 2.13's batched_grad_copy: a bucket's gradients are copied in once it is complete, then the
  // whole bucket divided by the world size (a true division, not a multiplication by 1/W).
  bool batched_grad_copy = false;
  std::optional<MixedPrecision> mixed_precision{};  // 2.1; registers its comm hook
  std::string module_name = "module";               // for logs
};

// Bucket limits in bytes from a size in MiB, as PyTorch: int(mb * 1024 * 1024).
size_t MegabytesToBytes(double mb);

// InvalidArgument, naming the option (and its flag), for a cap that is not positive, both a
// first-bucket cap and a bucket_cap_mb under 2.4's rule, or an option the chosen PyTorch does
// not have ("bucket_cap_mb_list is PyTorch 2.11's; these options follow 1.13").
absl::Status ValidateDdpOptions(const DdpOptions& options);

// The byte limits DDP's two plans walk under the options' PyTorch.
struct BucketCaps {
  // The constructor's plan, walking parameters in registration order: one unlimited bucket per
  // dtype unless find_unused_parameters (without static graph) or a cap list asks for sizes.
  std::vector<size_t> initial;
  BucketLimits rebuild;  // after the first synced iteration
};
BucketCaps BucketCapsOf(const DdpOptions& options);

// The options' rebuild limits ([first bucket, cap], or the cap list).
inline BucketLimits LimitsOf(const DdpOptions& options) { return BucketCapsOf(options).rebuild; }

// Where the options send the buffers: at every synced forward, at construction, at Join's end.
bool SyncsBuffersEachForward(const DdpOptions& options);
bool SyncsBuffersAtConstruction(const DdpOptions& options);
bool SyncsBuffersAtJoinEnd(const DdpOptions& options);

}  // namespace ddpkit::reducer
