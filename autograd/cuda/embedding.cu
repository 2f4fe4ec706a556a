// The GPU side of ops/embedding.cc: a gather forward, and a deterministic backward with one
// thread per (table row, column) that adds the matching gradient rows in index order (the host
// loop's order, no float atomics).
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/ops.h"

namespace ddpkit::cuda {
namespace {

template <typename T>
void GatherOf(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  const int64_t width = weight.size(1);
  const T* w = weight.device_data<T>();
  const int64_t* idx = indices.device_data<int64_t>();
  T* o = out.device_data<T>();
  ForEach(out.device(), out.numel(), "EmbeddingGather",
          [=] __device__(int64_t i) { o[i] = w[idx[i / width] * width + i % width]; });
}

template <typename T>
void BackwardOf(const Tensor& g, const Tensor& indices, const Tensor& dw) {
  const int64_t width = dw.size(1), n = indices.numel();
  const T* dy = g.device_data<T>();
  const int64_t* idx = indices.device_data<int64_t>();
  T* o = dw.device_data<T>();
  ForEach(dw.device(), dw.numel(), "EmbeddingBackward", [=] __device__(int64_t i) {
    const int64_t row = i / width, col = i % width;
    T total = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (idx[j] == row) total += dy[j * width + col];
    }
    o[i] = total;
  });
}

}  // namespace

void EmbeddingGather(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  weight.dtype() == DType::kFloat64 ? GatherOf<double>(weight, indices, out)
                                    : GatherOf<float>(weight, indices, out);
}

void EmbeddingBackward(const Tensor& g, const Tensor& indices, const Tensor& dw) {
  g.dtype() == DType::kFloat64 ? BackwardOf<double>(g, indices, dw)
                               : BackwardOf<float>(g, indices, dw);
}

}  // namespace ddpkit::cuda
