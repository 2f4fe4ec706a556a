// The GPU side of ops/attention.cc's head copies (its products are cuBLAS GEMMs through Gemm,
// its softmax softmax.cu): one thread per element of the heads tensor.
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/ops.h"

namespace ddpkit::cuda {
namespace {

template <typename T>
void CopyHeadsOf(const Tensor& rows, int64_t col, const Tensor& heads, bool into_heads) {
  const int64_t num_heads = heads.size(1), time = heads.size(2), head_dim = heads.size(3);
  const int64_t columns = rows.size(-1);
  T* r = rows.device_data<T>();
  T* h = heads.device_data<T>();
  // Heads element i is (b, head, t, d); its row element is (b, t, col + head * hd + d).
  ForEach(heads.device(), heads.numel(), "CopyHeads", [=] __device__(int64_t i) {
    const int64_t d = i % head_dim, t = (i / head_dim) % time;
    const int64_t head = (i / (head_dim * time)) % num_heads, b = i / (head_dim * time * num_heads);
    T* row = r + (b * time + t) * columns + col + head * head_dim + d;
    if (into_heads) {
      h[i] = *row;
    } else {
      *row = h[i];
    }
  });
}

}  // namespace

void CopyHeads(const Tensor& rows, int64_t col, const Tensor& heads, bool into_heads) {
  rows.dtype() == DType::kFloat64 ? CopyHeadsOf<double>(rows, col, heads, into_heads)
                                  : CopyHeadsOf<float>(rows, col, heads, into_heads);
}

}  // namespace ddpkit::cuda
