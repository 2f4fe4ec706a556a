// Embedding lookup: gather rows forward, scatter-add rows backward (a dense gradient).
#include "autograd/cuda/ops.h"
#include "autograd/function.h"
#include "autograd/kernels.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace ddpkit {
namespace {

// Throws unless every index names a row of a `vocab`-row table (read on the host).
void CheckIndices(const Tensor& indices, int64_t vocab) {
  const Tensor host = indices.is_cuda() ? indices.To(Device::Cpu()) : indices;
  const int64_t* idx = host.data<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    DDPKIT_CHECK(idx[i] >= 0 && idx[i] < vocab, "[embedding] index ", idx[i], " at position ", i,
                 " is outside the table's ", vocab, " rows");
  }
}

// out[i] <- weight[indices[i]].
void Gather(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  if constexpr (kWithCuda) {
    if (weight.is_cuda()) return cuda::EmbeddingGather(weight, indices, out);
  }
  const int64_t* idx = indices.data<int64_t>();
  for (int64_t i = 0; i < indices.numel(); ++i) {
    out.Rows(i, i + 1).CopyFrom(weight.Rows(idx[i], idx[i] + 1));
  }
}

// Row idx[i] of the table receives output row i's gradient, summed over repeats in index order.
Tensor ScatterAdd(const Tensor& g, const Tensor& indices, int64_t vocab, int64_t width) {
  Tensor dw = Tensor::Zeros({vocab, width}, g.dtype(), g.device());
  if constexpr (kWithCuda) {
    if (g.is_cuda()) {
      cuda::EmbeddingBackward(g, indices, dw);
      return dw;
    }
  }
  const int64_t* idx = indices.data<int64_t>();
  for (int64_t i = 0; i < indices.numel(); ++i) {
    AddInPlace(dw.Rows(idx[i], idx[i] + 1), g.Rows(i, i + 1));
  }
  return dw;
}

}  // namespace

Tensor EmbeddingLookup(const Tensor& weight, const Tensor& indices) {
  op_util::CheckMatrix("embedding", "weight", weight);
  DDPKIT_CHECK(indices.defined() && indices.dtype() == DType::kInt64 && indices.dim() == 1,
               "[embedding] indices must be int64 of shape [n], got ", indices.DebugString());
  op_util::CheckSameDevice("embedding", weight, indices);
  const int64_t vocab = weight.size(0), width = weight.size(1), n = indices.size(0);
  CheckIndices(indices, vocab);
  Tensor out = Tensor::Empty({n, width}, weight.dtype(), weight.device());
  Gather(weight, indices, out);
  RecordOp(out, "EmbeddingBackward", {&weight},
           [indices = indices.Clone(), vocab, width](const Tensor& g) {
             return TensorList{ScatterAdd(g, indices, vocab, width)};
           });
  return out;
}

}  // namespace ddpkit
