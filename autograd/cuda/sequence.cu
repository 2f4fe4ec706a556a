// The GPU side of ops/sequence.cc: one thread per (sequence, column) adding the sequence's valid
// rows in order (the host loop's order, no float atomics), and a backward that writes every
// element of dx, zero in the padding rows.
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/ops.h"

namespace ddpkit::cuda {
namespace {

template <typename T>
void MeanOf(const Tensor& x, const Tensor& lengths, const Tensor& out) {
  const int64_t d = out.size(1), seq_len = x.size(0) / out.size(0);
  const T* in = x.device_data<T>();
  const int64_t* len = lengths.device_data<int64_t>();
  T* o = out.device_data<T>();
  ForEach(out.device(), out.numel(), "SequenceMean", [=] __device__(int64_t e) {
    const int64_t i = e / d, c = e % d;
    T total = 0;
    for (int64_t r = 0; r < len[i]; ++r) total += in[(i * seq_len + r) * d + c];
    o[e] = total / static_cast<T>(len[i]);
  });
}

template <typename T>
void BackwardOf(const Tensor& g, const Tensor& lengths, const Tensor& dx) {
  const int64_t d = g.size(1), seq_len = dx.size(0) / g.size(0);
  const T* dy = g.device_data<T>();
  const int64_t* len = lengths.device_data<int64_t>();
  T* o = dx.device_data<T>();
  ForEach(dx.device(), dx.numel(), "SequenceMeanBackward", [=] __device__(int64_t e) {
    const int64_t row = e / d, c = e % d, i = row / seq_len;
    o[e] = row % seq_len < len[i] ? dy[i * d + c] / static_cast<T>(len[i]) : T(0);
  });
}

}  // namespace

void SequenceMean(const Tensor& x, const Tensor& lengths, const Tensor& out) {
  x.dtype() == DType::kFloat64 ? MeanOf<double>(x, lengths, out) : MeanOf<float>(x, lengths, out);
}

void SequenceMeanBackward(const Tensor& g, const Tensor& lengths, const Tensor& dx) {
  g.dtype() == DType::kFloat64 ? BackwardOf<double>(g, lengths, dx)
                               : BackwardOf<float>(g, lengths, dx);
}

}  // namespace ddpkit::cuda
