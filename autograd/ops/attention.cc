// Causal self-attention with several heads, as nanoGPT computes it in PyTorch 1.13 (no fused
// kernel there): from c_attn's output [B, T, 3C] split into q, k, v, per head
//   att = softmax(masked_fill(q k^T * (1/sqrt(hd)), above the diagonal, -inf)),  y = att v,
// and the heads put back side by side as [B, T, C]. One op and one backward node: PyTorch's
// chain of split, views, transposes, bmm, mul, masked_fill and softmax nodes holds no
// parameter and has one input and one output, so it leaves the engine's ready order as it is.
// The products are the project's GEMM, one per (batch, head).
#include <cmath>
#include <cstring>

#include "autograd/cuda/ops.h"
#include "autograd/function.h"
#include "autograd/gemm.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"
#include "autograd/ops/softmax_rows.h"

namespace ddpkit {
namespace {

struct AttentionShape {
  int64_t batch, time, width, heads, head_dim;  // width: C, the model's dimension
};

// Copies between columns [col, col + C) of `rows` [B, T, columns] and `heads` [B, H, T, hd]:
// into the heads (q, k or v out of c_attn's output, or y's gradient), or out of them (y, or
// q's, k's and v's gradients).
void CopyHeads(const Tensor& rows, int64_t col, const Tensor& heads, bool into_heads) {
  if constexpr (kWithCuda) {
    if (rows.is_cuda()) return cuda::CopyHeads(rows, col, heads, into_heads);
  }
  // Each (batch, head, time) row of the heads is one contiguous run of hd elements in `rows`.
  const int64_t batch = heads.size(0), num_heads = heads.size(1), time = heads.size(2);
  const int64_t head_dim = heads.size(3), columns = rows.size(-1);
  const int64_t element = static_cast<int64_t>(ElementSize(rows.dtype()));
  const auto bytes = static_cast<size_t>(head_dim * element);
  auto* row_base = static_cast<char*>(rows.raw_data()) + col * element;
  auto* part = static_cast<char*>(heads.raw_data());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < num_heads; ++h) {
      for (int64_t t = 0; t < time; ++t, part += bytes) {
        char* row = row_base + ((b * time + t) * columns + h * head_dim) * element;
        std::memcpy(into_heads ? part : row, into_heads ? row : part, bytes);
      }
    }
  }
}

// Head `i`'s matrix of a [B, H, rows, cols] tensor: a [rows, cols] view.
Tensor Head(const Tensor& t, int64_t i) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  return t.View({t.numel() / cols, cols}).Rows(i * rows, (i + 1) * rows);
}

double Scale(const AttentionShape& s) { return 1.0 / std::sqrt(static_cast<double>(s.head_dim)); }

struct AttentionSaved {
  AttentionShape s;
  Tensor q, k, v, att;  // [B, H, T, hd] x3, [B, H, T, T]
};

Tensor AttentionForward(const Tensor& qkv, AttentionSaved& saved) {
  const AttentionShape& s = saved.s;
  const Shape head_shape = {s.batch, s.heads, s.time, s.head_dim};
  Tensor* parts[] = {&saved.q, &saved.k, &saved.v};
  for (int64_t i = 0; i < 3; ++i) {
    *parts[i] = Tensor::Uninitialized(head_shape, qkv.dtype(), qkv.device());
    CopyHeads(qkv, i * s.width, *parts[i], /*into_heads=*/true);
  }
  saved.att = Tensor::Uninitialized({s.batch, s.heads, s.time, s.time}, qkv.dtype(), qkv.device());
  for (int64_t i = 0; i < s.batch * s.heads; ++i) {
    Gemm(false, true, s.time, s.time, s.head_dim, 1.0, Head(saved.q, i), Head(saved.k, i), 0.0,
         Head(saved.att, i));
  }
  op_util::SoftmaxLastDim(saved.att, saved.att, /*causal=*/true, Scale(s));
  Tensor y_heads = Tensor::Uninitialized(head_shape, qkv.dtype(), qkv.device());
  for (int64_t i = 0; i < s.batch * s.heads; ++i) {
    Gemm(false, false, s.time, s.head_dim, s.time, 1.0, Head(saved.att, i), Head(saved.v, i), 0.0,
         Head(y_heads, i));
  }
  Tensor y = Tensor::Uninitialized({s.batch, s.time, s.width}, qkv.dtype(), qkv.device());
  CopyHeads(y, 0, y_heads, /*into_heads=*/false);
  return y;
}

// With A = att, per head: dV = A^T dY, dA = dY V^T, dS = softmax'(dA) * scale (0 where masked,
// as A is), dQ = dS K, dK = dS^T Q.
Tensor AttentionBackward(const AttentionSaved& saved, const Tensor& g) {
  const AttentionShape& s = saved.s;
  const Shape head_shape = {s.batch, s.heads, s.time, s.head_dim};
  auto make = [&](const Shape& shape) {
    return Tensor::Uninitialized(shape, g.dtype(), g.device());
  };
  Tensor dy = make(head_shape), dq = make(head_shape), dk = make(head_shape), dv = make(head_shape),
         ds = make(saved.att.shape());
  CopyHeads(g, 0, dy, /*into_heads=*/true);
  for (int64_t i = 0; i < s.batch * s.heads; ++i) {
    Gemm(true, false, s.time, s.head_dim, s.time, 1.0, Head(saved.att, i), Head(dy, i), 0.0,
         Head(dv, i));
    Gemm(false, true, s.time, s.time, s.head_dim, 1.0, Head(dy, i), Head(saved.v, i), 0.0,
         Head(ds, i));
  }
  op_util::SoftmaxLastDimBackward(saved.att, ds, ds, Scale(s));
  for (int64_t i = 0; i < s.batch * s.heads; ++i) {
    Gemm(false, false, s.time, s.head_dim, s.time, 1.0, Head(ds, i), Head(saved.k, i), 0.0,
         Head(dq, i));
    Gemm(true, false, s.time, s.head_dim, s.time, 1.0, Head(ds, i), Head(saved.q, i), 0.0,
         Head(dk, i));
  }
  Tensor dqkv = make({s.batch, s.time, 3 * s.width});
  const Tensor* parts[] = {&dq, &dk, &dv};
  for (int64_t i = 0; i < 3; ++i) CopyHeads(dqkv, i * s.width, *parts[i], /*into_heads=*/false);
  return dqkv;
}

}  // namespace

Tensor CausalSelfAttention(const Tensor& qkv, int64_t heads) {
  op_util::CheckFloating("causal_self_attention", qkv);
  DDPKIT_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0,
               "[causal_self_attention] expects q, k and v side by side as [B, T, 3C], got ",
               ShapeString(qkv.shape()));
  const int64_t width = qkv.size(2) / 3;
  DDPKIT_CHECK(heads > 0 && width % heads == 0, "[causal_self_attention] ", heads,
               " heads do not divide the width ", width);
  AttentionSaved saved;
  saved.s = {qkv.size(0), qkv.size(1), width, heads, width / heads};
  Tensor y = AttentionForward(qkv, saved);
  if (!ShouldRecord({&qkv})) return y;
  RecordOp(y, "CausalSelfAttentionBackward", {&qkv},
           [saved = std::move(saved)](const Tensor& g) -> TensorList {
             return {AttentionBackward(saved, g)};
           });
  return y;
}

}  // namespace ddpkit
