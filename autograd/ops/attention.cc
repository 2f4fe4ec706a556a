// Causal self-attention with several heads, as nanoGPT computes it in PyTorch 1.13 (no fused
// kernel there): from c_attn's output [B, T, 3C] split into q, k, v, per head
//   att = softmax(masked_fill(q k^T * (1/sqrt(hd)), above the diagonal, -inf)),  y = att v,
// and the heads put back side by side as [B, T, C]. One op and one backward node: PyTorch's
// chain of split, views, transposes, bmm, mul, masked_fill and softmax nodes holds no
// parameter and has one input and one output, so it leaves the engine's ready order as it is.
// The products are the project's GEMM, one per (batch, head).
#include <cmath>
#include <limits>

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
// into the heads (q, k or v out of c_attn's output), or out of them (y, or a gradient).
template <typename T>
void CopyHeads(const AttentionShape& s, const Tensor& rows, int64_t col, const Tensor& heads,
               bool into_heads) {
  const int64_t columns = rows.size(-1);
  T* r = rows.data<T>();
  T* h = heads.data<T>();
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t head = 0; head < s.heads; ++head) {
      for (int64_t t = 0; t < s.time; ++t) {
        T* row = r + (b * s.time + t) * columns + col + head * s.head_dim;
        T* part = h + ((b * s.heads + head) * s.time + t) * s.head_dim;
        for (int64_t d = 0; d < s.head_dim; ++d)
          (into_heads ? part[d] : row[d]) = into_heads ? row[d] : part[d];
      }
    }
  }
}

// Head `i`'s matrix of a [B, H, rows, cols] tensor: a [rows, cols] view.
Tensor Head(const Tensor& t, int64_t i) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  return t.View({t.numel() / cols, cols}).Rows(i * rows, (i + 1) * rows);
}

struct AttentionSaved {
  AttentionShape s;
  Tensor q, k, v, att;  // [B, H, T, hd] x3, [B, H, T, T]
};

template <typename T>
Tensor AttentionForward(const Tensor& qkv, AttentionSaved& saved) {
  const AttentionShape& s = saved.s;
  const Shape head_shape = {s.batch, s.heads, s.time, s.head_dim};
  Tensor* parts[] = {&saved.q, &saved.k, &saved.v};
  for (int64_t i = 0; i < 3; ++i) {
    *parts[i] = Tensor::Uninitialized(head_shape, qkv.dtype(), qkv.device());
    CopyHeads<T>(s, qkv, i * s.width, *parts[i], /*into_heads=*/true);
  }
  saved.att = Tensor::Uninitialized({s.batch, s.heads, s.time, s.time}, qkv.dtype(), qkv.device());
  Tensor y_heads = Tensor::Uninitialized(head_shape, qkv.dtype(), qkv.device());
  const T scale = T(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  for (int64_t i = 0; i < s.batch * s.heads; ++i) {
    Tensor att = Head(saved.att, i);
    Gemm(false, true, s.time, s.time, s.head_dim, 1.0, Head(saved.q, i), Head(saved.k, i), 0.0,
         att);
    for (int64_t t = 0; t < s.time; ++t) {
      T* row = att.data<T>() + t * s.time;
      for (int64_t j = 0; j < s.time; ++j) {
        row[j] = j > t ? -std::numeric_limits<T>::infinity() : row[j] * scale;
      }
      op_util::SoftmaxRow(row, row, s.time);
    }
    Gemm(false, false, s.time, s.head_dim, s.time, 1.0, att, Head(saved.v, i), 0.0,
         Head(y_heads, i));
  }
  Tensor y = Tensor::Uninitialized({s.batch, s.time, s.width}, qkv.dtype(), qkv.device());
  CopyHeads<T>(s, y, 0, y_heads, /*into_heads=*/false);
  return y;
}

// With A = att, per head: dV = A^T dY, dA = dY V^T, dS = softmax'(dA) * scale (0 where masked,
// as A is), dQ = dS K, dK = dS^T Q.
template <typename T>
Tensor AttentionBackward(const AttentionSaved& saved, const Tensor& g) {
  const AttentionShape& s = saved.s;
  const Shape head_shape = {s.batch, s.heads, s.time, s.head_dim};
  Tensor dy = Tensor::Uninitialized(head_shape, g.dtype(), g.device());
  CopyHeads<T>(s, g, 0, dy, /*into_heads=*/true);
  Tensor dq = Tensor::Uninitialized(head_shape, g.dtype(), g.device());
  Tensor dk = Tensor::Uninitialized(head_shape, g.dtype(), g.device());
  Tensor dv = Tensor::Uninitialized(head_shape, g.dtype(), g.device());
  Tensor ds = Tensor::Uninitialized({s.time, s.time}, g.dtype(), g.device());
  const T scale = T(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  for (int64_t i = 0; i < s.batch * s.heads; ++i) {
    const Tensor att = Head(saved.att, i), dy_i = Head(dy, i);
    Gemm(true, false, s.time, s.head_dim, s.time, 1.0, att, dy_i, 0.0, Head(dv, i));
    Gemm(false, true, s.time, s.time, s.head_dim, 1.0, dy_i, Head(saved.v, i), 0.0, ds);
    for (int64_t t = 0; t < s.time; ++t) {
      T* row = ds.data<T>() + t * s.time;
      op_util::SoftmaxBackwardRow(att.data<T>() + t * s.time, row, row, s.time, scale);
    }
    Gemm(false, false, s.time, s.head_dim, s.time, 1.0, ds, Head(saved.k, i), 0.0, Head(dq, i));
    Gemm(true, false, s.time, s.head_dim, s.time, 1.0, ds, Head(saved.q, i), 0.0, Head(dk, i));
  }
  Tensor dqkv = Tensor::Uninitialized({s.batch, s.time, 3 * s.width}, g.dtype(), g.device());
  const Tensor* parts[] = {&dq, &dk, &dv};
  for (int64_t i = 0; i < 3; ++i) {
    CopyHeads<T>(s, dqkv, i * s.width, *parts[i], /*into_heads=*/false);
  }
  return dqkv;
}

}  // namespace

Tensor CausalSelfAttention(const Tensor& qkv, int64_t heads) {
  op_util::CheckFloating("causal_self_attention", qkv);
  DDPKIT_CHECK(!qkv.is_cuda(),
               "[causal_self_attention] runs on the host only (no CUDA kernel yet)");
  DDPKIT_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0,
               "[causal_self_attention] expects q, k "
               "and v side by side as [B, T, 3C], got ",
               ShapeString(qkv.shape()));
  const int64_t width = qkv.size(2) / 3;
  DDPKIT_CHECK(heads > 0 && width % heads == 0, "[causal_self_attention] ", heads,
               " heads do not divide the width ", width);
  AttentionSaved saved;
  saved.s = {qkv.size(0), qkv.size(1), width, heads, width / heads};
  Tensor y = DispatchFloating(qkv.dtype(), "causal_self_attention",
                              [&]<typename T>() { return AttentionForward<T>(qkv, saved); });
  if (!ShouldRecord({&qkv})) return y;
  RecordOp(
      y, "CausalSelfAttentionBackward", {&qkv},
      [saved = std::move(saved)](const Tensor& g) -> TensorList {
        return {DispatchFloating(g.dtype(), "causal_self_attention_backward",
                                 [&]<typename T>() { return AttentionBackward<T>(saved, g); })};
      });
  return y;
}

}  // namespace ddpkit
