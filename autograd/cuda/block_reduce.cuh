// Deterministic reductions inside one thread block: a fixed-shape tree over shared memory, so
// the same input sums to the same bits on every run (no atomics). For kernels launched with
// kThreadsPerBlock threads (a power of two).
#pragma once

#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/runtime.h"

namespace ddpkit::cuda {

// Every thread passes its value; every thread gets op over all of them. All threads of the
// block must call it (it synchronises).
template <typename T, typename Op>
__device__ T BlockReduce(T value, Op op) {
  __shared__ T shared[kThreadsPerBlock];
  shared[threadIdx.x] = value;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  const T result = shared[0];
  __syncthreads();  // the buffer may be reused by the next call
  return result;
}

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};

// Blocks for a row-wise kernel: one block per row, grid-stride over rows beyond the grid.
inline unsigned BlocksForRows(int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > 65535 ? 65535 : rows));
}

}  // namespace ddpkit::cuda
