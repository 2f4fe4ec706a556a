// Bucket and VariableLocator: the reducer's two data structures.
//
// A bucket is one flat gradient buffer shared by a few parameters of one dtype. Each parameter
// owns a slice of it, seen through a view shaped like the parameter; DDP copies a parameter's
// gradient into its view when the gradient is ready, and allreduces the whole buffer once every
// parameter in it is ready — one collective for many small tensors.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "autograd/tensor.h"
#include "comm/future.h"

namespace ddpkit::reducer {

struct Bucket {
  Tensor gradients;                      // the flat buffer, [sum of numels], the params' dtype
  std::vector<size_t> variable_indices;  // which parameters, in buffer order
  std::vector<Tensor> variables;         // the parameters themselves, same order
  std::vector<int64_t> offsets;          // where each parameter's slice starts (elements)
  std::vector<int64_t> lengths;          // each slice's numel
  std::vector<Tensor> views;             // slice i viewed with parameter i's shape
  size_t size_limit = 0;                 // the byte limit the assignment closed it under

  // The pending counter: parameters of this bucket not yet ready in this backward. The bucket
  // is ready when it reaches 0 and is launched once every earlier bucket has been.
  size_t pending = 0;
  // batched_grad_copy: slots whose gradient is copied in once the bucket is complete.
  std::vector<size_t> deferred;
  // The bucket's reduction in flight (allreduce or comm hook), from launch to finalize; none
  // when skip_all_reduce_unused_params skipped it.
  std::shared_ptr<comm::Future> future_work;
  std::chrono::steady_clock::time_point launched_at{};

  size_t nbytes() const { return gradients.nbytes(); }
};

// Where a parameter's gradient lives: buckets[bucket_index].views[intra_bucket_index].
struct VariableLocator {
  size_t bucket_index = 0;
  size_t intra_bucket_index = 0;
};

}  // namespace ddpkit::reducer
