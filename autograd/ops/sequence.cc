// Mean over each padded sequence's own rows: the forward reads only rows [0, lengths[i]) of
// sequence i, and the backward writes zeros into the padding rows, so padding never leaks.
#include "autograd/cuda/ops.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace ddpkit {
namespace {

// Throws unless every length is in [1, seq_len] (read on the host).
void CheckLengths(const Tensor& lengths, int64_t seq_len) {
  const Tensor host = lengths.is_cuda() ? lengths.To(Device::Cpu()) : lengths;
  const int64_t* len = host.data<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    DDPKIT_CHECK(len[i] >= 1 && len[i] <= seq_len, "[sequence_mean] lengths[", i, "] = ", len[i],
                 " must be in [1, L=", seq_len, "]");
  }
}

// out[i] <- mean of rows [i * L, i * L + lengths[i]) of x, each column summed in row order.
void MeanInto(const Tensor& x, const Tensor& lengths, const Tensor& out) {
  if constexpr (kWithCuda) {
    if (x.is_cuda()) return cuda::SequenceMean(x, lengths, out);
  }
  DispatchFloating(x.dtype(), "sequence_mean", [&]<typename T>() {
    const int64_t b = out.size(0), d = out.size(1), seq_len = x.size(0) / b;
    const int64_t* len = lengths.data<int64_t>();
    const T* in = x.data<T>();
    T* o = out.data<T>();
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t c = 0; c < d; ++c) {
        T total = 0;
        for (int64_t r = 0; r < len[i]; ++r) total += in[(i * seq_len + r) * d + c];
        o[i * d + c] = total / static_cast<T>(len[i]);
      }
    }
  });
}

// dx [b * L, d]: sequence i's valid rows get g[i] / lengths[i], its padding rows zero.
Tensor MeanGrad(const Tensor& g, const Tensor& lengths, int64_t rows) {
  if constexpr (kWithCuda) {
    if (g.is_cuda()) {
      Tensor dx = Tensor::Uninitialized({rows, g.size(1)}, g.dtype(), g.device());
      cuda::SequenceMeanBackward(g, lengths, dx);
      return dx;
    }
  }
  Tensor dx = Tensor::Zeros({rows, g.size(1)}, g.dtype());
  DispatchFloating(g.dtype(), "sequence_mean_backward", [&]<typename T>() {
    const int64_t b = g.size(0), d = g.size(1), seq_len = rows / b;
    const int64_t* len = lengths.data<int64_t>();
    const T* dy = g.data<T>();
    T* o = dx.data<T>();
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t r = 0; r < len[i]; ++r) {
        for (int64_t c = 0; c < d; ++c) {
          o[(i * seq_len + r) * d + c] = dy[i * d + c] / static_cast<T>(len[i]);
        }
      }
    }
  });
  return dx;
}

}  // namespace

Tensor SequenceMean(const Tensor& x, const Tensor& lengths) {
  op_util::CheckMatrix("sequence_mean", "x", x);
  DDPKIT_CHECK(lengths.defined() && lengths.dtype() == DType::kInt64 && lengths.dim() == 1 &&
                   lengths.numel() >= 1,
               "[sequence_mean] lengths must be int64 of shape [b] with b >= 1, got ",
               lengths.defined() ? lengths.DebugString() : "an undefined tensor");
  op_util::CheckSameDevice("sequence_mean", x, lengths);
  const int64_t b = lengths.size(0), rows = x.size(0);
  DDPKIT_CHECK(rows % b == 0, "[sequence_mean] x has ", rows, " rows, not a multiple of the ", b,
               " sequences in lengths (x must hold b padded sequences of L rows each)");
  CheckLengths(lengths, rows / b);
  Tensor out = Tensor::Empty({b, x.size(1)}, x.dtype(), x.device());
  MeanInto(x, lengths, out);
  RecordOp(out, "SequenceMeanBackward", {&x}, [lengths = lengths.Clone(), rows](const Tensor& g) {
    return TensorList{MeanGrad(g, lengths, rows)};
  });
  return out;
}

}  // namespace ddpkit
