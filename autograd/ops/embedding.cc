// Embedding lookup: gather rows forward, scatter-add rows backward (a dense gradient).
#include "autograd/function.h"
#include "autograd/kernels.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace ddpkit {

Tensor EmbeddingLookup(const Tensor& weight, const Tensor& indices) {
  op_util::CheckMatrix("embedding", "weight", weight);
  DDPKIT_CHECK(indices.defined() && indices.dtype() == DType::kInt64 && indices.dim() == 1,
               "[embedding] indices must be int64 of shape [n], got ", indices.DebugString());
  const int64_t vocab = weight.size(0), width = weight.size(1), n = indices.size(0);
  const int64_t* idx = indices.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    DDPKIT_CHECK(idx[i] >= 0 && idx[i] < vocab, "[embedding] index ", idx[i], " at position ", i,
                 " is outside the table's ", vocab, " rows");
  }
  Tensor out = Tensor::Empty({n, width}, weight.dtype());
  for (int64_t i = 0; i < n; ++i) out.Rows(i, i + 1).CopyFrom(weight.Rows(idx[i], idx[i] + 1));
  // Row idx[i] of the table receives output row i's gradient (summed over repeats).
  RecordOp(out, "EmbeddingBackward", {&weight},
           [indices = indices.Clone(), vocab, width](const Tensor& g) {
             Tensor dw = Tensor::Zeros({vocab, width}, g.dtype());
             const int64_t* idx = indices.data<int64_t>();
             for (int64_t i = 0; i < indices.numel(); ++i) {
               AddInPlace(dw.Rows(idx[i], idx[i] + 1), g.Rows(i, i + 1));
             }
             return TensorList{dw};
           });
  return out;
}

}  // namespace ddpkit
