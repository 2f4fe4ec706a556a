// Differentiable ops. Each is defined in autograd/ops/<family>.cc with its backward right
// below its forward. All compute in float32 or float64; mixing dtypes is an error. Each op runs
// where its inputs live — the host, or a GPU (kernels in autograd/cuda/, the same pointwise math
// from autograd/pointwise.h) — and its output and gradients live there too; operands on
// different devices are an error that says to move them with To().
//
// Shapes: tensors are row-major. Elementwise ops take equal shapes, or one side with a single
// element (a scalar, e.g. a learnable logit scale), which is broadcast.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "autograd/tensor.h"

namespace ddpkit {

// --- Elementwise (ops/elementwise.cc) --------------------------------------------------------
Tensor Add(const Tensor& a, const Tensor& b);
Tensor Sub(const Tensor& a, const Tensor& b);
Tensor Mul(const Tensor& a, const Tensor& b);
Tensor MulScalar(const Tensor& a, double factor);
Tensor DivScalar(const Tensor& a, double divisor);
Tensor Relu(const Tensor& x);
Tensor Tanh(const Tensor& x);
Tensor Gelu(const Tensor& x);  // exact form, x * Phi(x), as PyTorch's default
Tensor Exp(const Tensor& x);
Tensor Log(const Tensor& x);

// x [..., t, d] + y [t, d]: y (any trailing shape of x) added to each of x's leading blocks, as
// PyTorch broadcasts nanoGPT's tok_emb [B, T, C] + pos_emb [T, C].
Tensor AddTrailing(const Tensor& x, const Tensor& y);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return Add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return Sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return Mul(a, b); }
inline Tensor operator*(const Tensor& a, double s) { return MulScalar(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return MulScalar(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return DivScalar(a, s); }

// --- Reductions (ops/reduce.cc) --------------------------------------------------------------
Tensor Sum(const Tensor& x);   // all elements -> shape []
Tensor Mean(const Tensor& x);  // all elements -> shape []; NaN for an empty tensor, as PyTorch

// --- Sequences (ops/sequence.cc) ------------------------------------------------------------
// x holds b padded sequences of L = x.size(0) / b rows each ([b * L, d], sequence i in rows
// [i * L, (i + 1) * L)); row i of the result [b, d] is the mean of sequence i's first lengths[i]
// rows (int64 [b], each in [1, L], on x's device). The padding rows get a zero gradient, so
// whatever they hold never reaches the output or a gradient.
Tensor SequenceMean(const Tensor& x, const Tensor& lengths);

// --- Matrix products (ops/matmul.cc) ---------------------------------------------------------
Tensor Matmul(const Tensor& a, const Tensor& b);  // [m, k] x [k, n] -> [m, n]
// x [n, in], weight [out, in] (PyTorch's layout), bias [out] or undefined -> [n, out]; a 3-D
// x [b, t, in] gives [b, t, out] through PyTorch's graph (view, addmm or mm, view).
Tensor Linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// Relu(Linear(x, weight, bias)) as one op on the host: the bias and ReLU applied in the GEMM's
// epilogue, one backward node that masks the gradient and sums it for the bias in one pass.
// nn::Sequential uses it for a Linear followed by a ReLU.
Tensor LinearRelu(const Tensor& x, const Tensor& weight, const Tensor& bias);

// --- Losses (ops/loss.cc) --------------------------------------------------------------------
Tensor LogSoftmax(const Tensor& x);  // over the last dimension of [n, c]

enum class Reduction { kMean, kSum };
struct CrossEntropyOptions {
  // Row i's class is targets[i] + target_offset. With targets = 0..b-1 and offset r*b, a rank
  // holding rows r*b... of a global batch labels them against globally gathered columns.
  int64_t target_offset = 0;
  Reduction reduction = Reduction::kMean;
};
// logits [n, c], targets int64 [n].
Tensor CrossEntropy(const Tensor& logits, const Tensor& targets,
                    const CrossEntropyOptions& options = {});
Tensor Mse(const Tensor& prediction, const Tensor& target);  // mean of squared differences

// --- Shape (ops/shape.cc) --------------------------------------------------------------------
Tensor Transpose(const Tensor& x);                          // [m, n] -> [n, m]
Tensor Concat(const TensorList& parts);                     // along dim 0
Tensor Slice(const Tensor& x, int64_t begin, int64_t end);  // rows [begin, end), a view
Tensor Reshape(const Tensor& x, const Shape& shape);        // a view

// --- Vision: NCHW images (ops/conv.cc, ops/batch_norm.cc, ops/pool.cc) ----------------------
// On a GPU: cuda/conv.cc (cuDNN), cuda/batch_norm.cu, cuda/pool.cu; SyncBatchNorm is host only.
// Each backward node has PyTorch 1.13's edges in its order (convolution: input, weight, bias;
// native_batch_norm: input, weight, bias), so gradients become ready in PyTorch's order.
struct Conv2dOptions {
  int64_t stride = 1;   // both axes
  int64_t padding = 0;  // zeros on every side
};
// x [N, C, H, W], weight [O, C, kH, kW], bias [O] or undefined -> [N, O, Ho, Wo] with
// Ho = (H + 2 padding - kH) / stride + 1 (cross-correlation, as torch.nn.functional.conv2d).
Tensor Conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv2dOptions& options = {});

// SyncBatchNorm's cross-rank step (comm/ops/sync_batch_norm.h implements it with a process group):
// sums `values` element-wise over the ranks that share one batch, in place. `what` names the
// statistics for an error. Collective: every rank calls it at the same point of its step.
class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;
  virtual void SumAcrossRanks(std::vector<double>& values, std::string_view what) = 0;
};

struct BatchNormOptions {
  bool training = true;   // batch statistics (and a running-stats update) or the running ones
  double momentum = 0.1;  // running <- (1 - momentum) running + momentum * batch
  double eps = 1e-5;
  // Training only: the batch is every rank's — each channel's sum, sum of squares and count are
  // summed across ranks before the mean and variance are taken, and in backward the two
  // per-channel sums dx needs (weight's and bias's gradients stay this rank's own). This rank's
  // input may hold any number of rows; the global count must exceed 1.
  std::shared_ptr<BatchNormSync> sync{};
};
// x [N, C, *]; weight, bias [C] or undefined (no affine); running_mean, running_var [C] or
// undefined (needed in evaluation). Training normalises with the batch's mean and biased
// variance and updates the running stats in place (the variance unbiased), as
// torch.nn.functional.batch_norm; num_batches_tracked is the module's (nn::BatchNorm2d).
Tensor BatchNorm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                 const Tensor& running_mean, const Tensor& running_var,
                 const BatchNormOptions& options = {});

struct Pool2dOptions {
  int64_t kernel = 1;   // square
  int64_t stride = 0;   // 0: the kernel size, as PyTorch's default
  int64_t padding = 0;  // at most kernel / 2; padded cells never win
};
Tensor MaxPool2d(const Tensor& x, const Pool2dOptions& options);  // floor mode, dilation 1
// [N, C, H, W] -> [N, C, out_h, out_w], PyTorch's windows [floor(i H / out), ceil((i+1) H / out)).
Tensor AdaptiveAvgPool2d(const Tensor& x, int64_t out_h = 1, int64_t out_w = 1);
// Dimensions start_dim.. merged into one (a view), as torch.flatten(x, start_dim).
Tensor Flatten(const Tensor& x, int64_t start_dim = 1);

// --- Others ----------------------------------------------------------------------------------
// Each row divided by max(its L2 norm, eps), as torch.nn.functional.normalize (ops/normalize.cc).
Tensor L2NormalizeRows(const Tensor& x, double eps = 1e-12);
// Rows of weight [v, d] picked by int64 indices [n] -> [n, d] (ops/embedding.cc).
Tensor EmbeddingLookup(const Tensor& weight, const Tensor& indices);

// --- Transformers (ops/layer_norm.cc, softmax.cc, attention.cc) -----------------------------
// PyTorch's layer_norm over the last dimension: each row normalised by its mean and biased
// variance (+ eps), then * weight + bias per column. weight and bias are [x.size(-1)] or
// undefined (none). Its backward node's edges are (x, weight, bias), as native_layer_norm's.
Tensor LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// Softmax over the last dimension (torch.softmax(x, dim=-1)).
Tensor Softmax(const Tensor& x);
// nanoGPT's causal self-attention on c_attn's output qkv [B, T, 3C] (q, k, v side by side):
// per head of width hd = C / heads, softmax(q k^T / sqrt(hd), masked above the diagonal) v,
// the heads side by side again -> [B, T, C]. One backward node with one edge (to qkv).
Tensor CausalSelfAttention(const Tensor& qkv, int64_t heads);

}  // namespace ddpkit
