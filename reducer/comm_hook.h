// Communication hooks: replace the plain allreduce of a bucket with user code, as PyTorch's
// DistributedDataParallel.register_comm_hook.
//
// A hook receives a GradBucket when the bucket is ready and returns a Future of the reduced
// buffer; it owns the math — with a hook the reducer copies gradients into the bucket without
// dividing by the world size. The future's value (the same shape and dtype as the buffer) is
// written back into the parameters' gradients at the end of backward.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/future.h"
#include "comm/process_group.h"

namespace ddpkit::reducer {

class GradBucket {
 public:
  GradBucket(size_t index, size_t bucket_count, const Tensor& buffer,
             const std::vector<Tensor>& gradients, const std::vector<Tensor>& parameters)
      : index_(index),
        bucket_count_(bucket_count),
        buffer_(buffer),
        gradients_(gradients),
        parameters_(parameters) {}

  // Position in reduction order: 0 is reduced first. Buckets are rebuilt after the first
  // iteration, so an index only means the same parameters from then on.
  size_t index() const { return index_; }
  size_t bucket_count() const { return bucket_count_; }
  // The last bucket to be reduced holds the model's first layers.
  bool is_last() const { return index_ + 1 == bucket_count_; }
  // The flat buffer of all the bucket's gradients.
  const Tensor& buffer() const { return buffer_; }
  // Per-parameter views into buffer(), shaped like the parameters, in buffer order.
  const std::vector<Tensor>& gradients() const { return gradients_; }
  const std::vector<Tensor>& parameters() const { return parameters_; }

 private:
  size_t index_;
  size_t bucket_count_;
  const Tensor& buffer_;
  const std::vector<Tensor>& gradients_;
  const std::vector<Tensor>& parameters_;
};

using CommHook = std::function<std::shared_ptr<comm::Future>(GradBucket& bucket)>;

// The built-in hooks, PyTorch's default_hooks.
//  * allreduce: divide by the world size, allreduce SUM — the numbers of no hook but for the last
//    bit (a division where DDP's own copy multiplies by 1/W);
//  * fp16 / bf16: compress to float16 / bfloat16, divide by the world size there, allreduce the
//    compressed copy (half the bytes on the wire), decompress into the buffer. The division
//    comes before the sum so large gradients cannot overflow float16.
enum class BuiltinCommHook { kAllreduce, kFp16Compress, kBf16Compress };

absl::StatusOr<BuiltinCommHook> ParseBuiltinCommHook(std::string_view name);  // allreduce|fp16|bf16
std::string_view BuiltinCommHookName(BuiltinCommHook hook);
CommHook MakeBuiltinCommHook(BuiltinCommHook hook, comm::ProcessGroup& group);

// The hook DDP registers for mixed_precision (ddp_options.h): the bucket cast to `reduce_dtype`,
// summed, divided by the world size in that dtype, and cast back (PyTorch's
// _reducer_allreduce_and_upcast_hook).
CommHook MixedPrecisionHook(comm::ProcessGroup& group, DType reduce_dtype);
inline constexpr std::string_view kMixedPrecisionHookName = "_reducer_allreduce_and_upcast_hook";

}  // namespace ddpkit::reducer
