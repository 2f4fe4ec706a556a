// The GPU side of the differentiable ops (autograd/ops/) and of the optimizers: each function
// here mirrors a host loop in the op file of the same name (elementwise.cu for elementwise.cc,
// ...), with the same contract, queued on the calling thread's current stream. Outputs are
// allocated by the caller on the inputs' GPU unless a function returns a tensor.
//
// Defined only in a CUDA build; callers guard each call with `if constexpr (kWithCuda)`
// (autograd/device.h). Reductions are deterministic: fixed-order block trees, no atomics.
#pragma once

#include "autograd/tensor.h"

namespace ddpkit {
struct AdamUpdate;
namespace blas {
struct ConvArgs;
}  // namespace blas
}  // namespace ddpkit

namespace ddpkit::cuda {

// --- elementwise.cu: the functors of autograd/pointwise.h ------------------------------
// out[i] = f(x[i]) — a new tensor on x's GPU.
template <typename F>
Tensor Map(const Tensor& x, F f);
// out[i] = f(a[i], b[i]), a single-element side broadcast.
template <typename F>
Tensor Zip(const Tensor& a, const Tensor& b, F f);

// --- reduce.cu ----------------------------------------------------------------------------
// The sum of all elements (accumulated in double), as a shape-[] tensor on x's GPU.
Tensor Sum(const Tensor& x);
// A tensor of `shape` on g's GPU with every element g[0] (g has one element).
Tensor ExpandScalar(const Tensor& g, const Shape& shape);

// --- matmul.cu ----------------------------------------------------------------------------
// Every row of out [rows, n] <- bias [n].
void BroadcastRows(const Tensor& out, const Tensor& bias);
// sums [n] <- column sums of g [rows, n], each column summed in row order.
void ColumnSums(const Tensor& g, const Tensor& sums);

// --- loss.cu ------------------------------------------------------------------------------
// Row-wise log-softmax of x [rows, cols] into out.
void LogSoftmaxRows(const Tensor& x, const Tensor& out);
// dx = dy - exp(y) * rowsum(dy), y the saved log-softmax.
void LogSoftmaxBackward(const Tensor& dy, const Tensor& y, const Tensor& dx);
// -scale * sum_r log_probs[r, labels[r]] as a shape-[] tensor (labels int64 [rows]).
Tensor NllSum(const Tensor& log_probs, const Tensor& labels, double scale);
// dx[r] = g * scale * (exp(log_probs[r]) - onehot(labels[r])), g a one-element tensor.
void CrossEntropyBackward(const Tensor& g, const Tensor& log_probs, const Tensor& labels,
                          double scale, const Tensor& dx);

// --- shape.cu -----------------------------------------------------------------------------
// out [cols, rows] <- x [rows, cols] transposed.
void Transpose(const Tensor& x, const Tensor& out);

// --- normalize.cu -------------------------------------------------------------------------
// out[r] = x[r] / norms[r] with norms[r] = max(||x[r]||, eps) (norms: float64 [rows]).
void L2NormalizeRows(const Tensor& x, const Tensor& out, const Tensor& norms, double eps);
// dx[r] = (dy[r] - y[r] (y[r] . dy[r])) / norms[r], or dy[r] / eps where the norm was clamped.
void L2NormalizeRowsBackward(const Tensor& dy, const Tensor& y, const Tensor& norms, double eps,
                             const Tensor& dx);

// --- embedding.cu -------------------------------------------------------------------------
// out[i] <- weight[indices[i]] (indices int64 [n], already range-checked).
void EmbeddingGather(const Tensor& weight, const Tensor& indices, const Tensor& out);
// dw[v] <- sum of g[i] over the i with indices[i] == v, in index order (deterministic).
void EmbeddingBackward(const Tensor& g, const Tensor& indices, const Tensor& dw);

// --- sequence.cu --------------------------------------------------------------------------
// out [b, d] <- the mean of each sequence's first lengths[i] rows of x [b * L, d] (lengths int64
// [b] on x's GPU, already range-checked), each column summed in row order.
void SequenceMean(const Tensor& x, const Tensor& lengths, const Tensor& out);
// dx [b * L, d] <- g[i] / lengths[i] in sequence i's valid rows, zero in its padding rows.
void SequenceMeanBackward(const Tensor& g, const Tensor& lengths, const Tensor& dx);

// --- layer_norm.cu -------------------------------------------------------------------------
// Per row of x (the last dimension): xhat = (x - mean) * rstd, y = xhat * weight + bias (either
// undefined: 1 and 0), rstd [rows]; one block per row, sums in double.
void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
               const Tensor& y, const Tensor& xhat, const Tensor& rstd);
// dx = rstd (g w - mean(g w) - xhat mean(g w xhat)) per row; dw, db (zeroed, [d]) the column
// sums of g xhat and g in row order. Undefined outputs are skipped.
void LayerNormBackward(const Tensor& g, const Tensor& xhat, const Tensor& rstd,
                       const Tensor& weight, const Tensor& dx, const Tensor& dw, const Tensor& db);

// --- softmax.cu ---------------------------------------------------------------------------
// op_util::SoftmaxLastDim and its backward (autograd/ops/softmax_rows.h): one block per row.
void SoftmaxRows(const Tensor& x, const Tensor& y, bool causal, double scale);
void SoftmaxRowsBackward(const Tensor& y, const Tensor& dy, const Tensor& dx, double scale);

// --- attention.cu -------------------------------------------------------------------------
// Columns [col, col + C) of rows [B, T, columns] to or from heads [B, H, T, hd].
void CopyHeads(const Tensor& rows, int64_t col, const Tensor& heads, bool into_heads);

// --- elementwise.cu: AddTrailing ----------------------------------------------------------
// out = x + y repeated over x's leading blocks of y.numel() elements.
void AddTrailing(const Tensor& x, const Tensor& y, const Tensor& out);
// out [m] <- the sum of g's blocks of m elements, in block order.
void SumBlocks(const Tensor& g, const Tensor& out);

// --- conv.cc: cuDNN (autograd/cuda/cudnn.h), NCHW, the geometry ops/conv.cc checked -------
// out = conv2d(x, weight) + bias (bias undefined: none).
void Conv2dForward(const blas::ConvArgs& args, const Tensor& x, const Tensor& weight,
                   const Tensor& bias, const Tensor& out);
// dx = the input gradient of dy; dw = the weight gradient; db [o] = dy's per-channel sums. Each
// output is written in full (no accumulation); a batch of zero images is the caller's.
void Conv2dBackwardData(const blas::ConvArgs& args, const Tensor& dy, const Tensor& weight,
                        const Tensor& dx);
void Conv2dBackwardWeight(const blas::ConvArgs& args, const Tensor& x, const Tensor& dy,
                          const Tensor& dw);
void Conv2dBackwardBias(const blas::ConvArgs& args, const Tensor& dy, const Tensor& db);

// --- batch_norm.cu --------------------------------------------------------------------------
// x [N, C, *]. mean and invstd: float64 [C] on x's GPU. Training: the batch mean and
// 1 / sqrt(biased var + eps), running_mean / running_var (either undefined) moved by momentum,
// the variance unbiased; evaluation: from the running statistics.
void BatchNormStatistics(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                         bool training, double momentum, double eps, const Tensor& mean,
                         const Tensor& invstd);
// out = (x - mean) invstd weight + bias per channel (weight, bias undefined: 1, 0).
void BatchNormApply(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                    const Tensor& invstd, const Tensor& out);
// dw = sum(dy xhat), db = sum(dy) per channel; dx = weight invstd (dy - [training] (sum(dy) +
// xhat sum(dy xhat)) / count). Undefined outputs are skipped.
void BatchNormBackward(const Tensor& x, const Tensor& dy, const Tensor& weight, const Tensor& mean,
                       const Tensor& invstd, bool training, const Tensor& dx, const Tensor& dw,
                       const Tensor& db);

// --- pool.cu ------------------------------------------------------------------------------
// planes = N * C planes of h x w pooled to ho x wo (kernel, stride, padding: max pool only).
struct Pool2dGeometry {
  int64_t planes = 0, h = 0, w = 0, ho = 0, wo = 0, kernel = 0, stride = 0, padding = 0;
};
// out and argmax (int64, each output's flat in-plane index; the first maximum, NaN wins).
void MaxPool2d(const Tensor& x, const Pool2dGeometry& g, const Tensor& out, const Tensor& argmax);
// dx [planes, h, w] (written in full) <- each dy summed into its argmax.
void MaxPool2dBackward(const Tensor& dy, const Tensor& argmax, const Pool2dGeometry& g,
                       const Tensor& dx);
// PyTorch's adaptive average windows; dx written in full.
void AdaptiveAvgPool2d(const Tensor& x, const Pool2dGeometry& g, const Tensor& out);
void AdaptiveAvgPool2dBackward(const Tensor& dy, const Pool2dGeometry& g, const Tensor& dx);

// --- optim.cu -----------------------------------------------------------------------------
// One Adam step on every element of param (grad, exp_avg, exp_avg_sq alike on its GPU).
void AdamStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
              const Tensor& exp_avg_sq, const AdamUpdate& update);

}  // namespace ddpkit::cuda
