// batch_norm over [N, C, *]: in training, each channel normalised by its batch mean and biased
// variance, and the running statistics (when given) moved toward them — the variance as its
// unbiased estimate, as PyTorch; in evaluation, normalised by the running statistics. Statistics
// are accumulated in double, as PyTorch's CPU kernel does for float32. With a BatchNormSync
// (SyncBatchNorm) the batch is every rank's: forward sums each channel's sum, sum of squares and
// count across ranks, backward the two sums dx needs. On a GPU the same formulas run as CUDA
// kernels (autograd/cuda/batch_norm.cu); SyncBatchNorm stays on the host there.
#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "autograd/cuda/ops.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"
#include "autograd/ops/vec_math.h"

namespace ddpkit {
namespace {

// x viewed as [n, channels, inner]: channel c of image i is x[(i * channels + c) * inner ...].
struct BnLayout {
  int64_t n, channels, inner;
  int64_t count() const { return n * inner; }  // elements per channel
};

// The per-channel statistics the output was normalised with, and the count of elements per
// channel they cover (every rank's under SyncBatchNorm).
struct BnStats {
  std::vector<double> mean, invstd;
  double count = 0;
};

void CheckChannelVector(const char* what, const Tensor& t, const Tensor& x) {
  if (!t.defined()) return;
  DDPKIT_CHECK(t.shape() == Shape{x.size(1)}, "[batch_norm] ", what, " must be [", x.size(1),
               "], got ", ShapeString(t.shape()));
  DDPKIT_CHECK(t.dtype() == x.dtype(), "[batch_norm] ", what, " is ", DTypeName(t.dtype()),
               " but the input is ", DTypeName(x.dtype()));
  op_util::CheckSameDevice("batch_norm", x, t);
}

BnLayout CheckBatchNorm(const Tensor& x, const TensorList& channel_vectors,
                        const BatchNormOptions& options) {
  op_util::CheckFloating("batch_norm", x);
  DDPKIT_CHECK(x.dim() >= 2, "[batch_norm] input must be [N, C, ...], got ",
               ShapeString(x.shape()));
  DDPKIT_CHECK(!x.is_cuda() || !options.training || !options.sync,
               "[sync_batch_norm] runs on the host only: its cross-rank sums are host vectors and "
               "the GPU path has no such step yet; train SyncBatchNorm with --device cpu, or "
               "plain BatchNorm2d on ",
               x.device().ToString());
  const char* names[] = {"weight", "bias", "running_mean", "running_var"};
  for (size_t i = 0; i < channel_vectors.size(); ++i) {
    CheckChannelVector(names[i], channel_vectors[i], x);
  }
  const BnLayout layout{x.size(0), x.size(1),
                        x.numel() / std::max<int64_t>(1, x.size(0) * x.size(1))};
  DDPKIT_CHECK(!options.training || options.sync || layout.count() > 1,
               "[batch_norm] expected more than 1 value per channel when training, got input ",
               ShapeString(x.shape()));
  DDPKIT_CHECK(options.training || (channel_vectors[2].defined() && channel_vectors[3].defined()),
               "[batch_norm] evaluation needs running_mean and running_var");
  return layout;
}

// Batch mean and biased variance per channel (two passes, in double; `omp simd` lets each
// plane's sum vectorise, in another order than one by one).
template <typename T>
[[gnu::always_inline]] inline void BatchMomentsOf(const T* x, const BnLayout& l, double* mean,
                                                  double* var) {
  for (int64_t i = 0; i < l.n * l.channels; ++i) {
    const T* p = x + i * l.inner;
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t k = 0; k < l.inner; ++k) sum += p[k];
    mean[i % l.channels] += sum;
  }
  for (int64_t c = 0; c < l.channels; ++c) mean[c] /= static_cast<double>(l.count());
  for (int64_t i = 0; i < l.n * l.channels; ++i) {
    const T* p = x + i * l.inner;
    const double m = mean[i % l.channels];
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t k = 0; k < l.inner; ++k) sum += (p[k] - m) * (p[k] - m);
    var[i % l.channels] += sum;
  }
  for (int64_t c = 0; c < l.channels; ++c) var[c] /= static_cast<double>(l.count());
}

// The float32 loops once per ISA level (vec_math.h).
DDPKIT_VECTOR_CLONES void BatchMomentsFloat(const float* x, const BnLayout& l, double* mean,
                                            double* var) {
  BatchMomentsOf(x, l, mean, var);
}

template <typename T>
std::pair<std::vector<double>, std::vector<double>> BatchMoments(const T* x, const BnLayout& l) {
  std::vector<double> mean(l.channels, 0.0), var(l.channels, 0.0);
  if constexpr (std::is_same_v<T, float>) {
    BatchMomentsFloat(x, l, mean.data(), var.data());
  } else {
    BatchMomentsOf(x, l, mean.data(), var.data());
  }
  return {std::move(mean), std::move(var)};
}

// SyncBatchNorm's moments: this rank's per-channel sums [sum x (C), sum x^2 (C), count] summed
// across ranks in one collective, then the global mean and biased variance E[x^2] - mean^2.
template <typename T>
std::pair<std::vector<double>, std::vector<double>> SyncedMoments(const T* x, const BnLayout& l,
                                                                  BatchNormSync& sync,
                                                                  double& count) {
  const int64_t C = l.channels;
  std::vector<double> sums(2 * C + 1, 0.0);
  for (int64_t i = 0; i < l.n * C; ++i) {
    const T* p = x + i * l.inner;
    for (int64_t k = 0; k < l.inner; ++k) {
      sums[i % C] += p[k];
      sums[C + i % C] += static_cast<double>(p[k]) * p[k];
    }
  }
  sums[2 * C] = static_cast<double>(l.count());
  sync.SumAcrossRanks(sums, "the batch statistics (sum, sum of squares, count per channel)");
  count = sums[2 * C];
  DDPKIT_CHECK(count > 1,
               "[sync_batch_norm] expected more than 1 value per channel over all "
               "ranks when training, got ",
               count);
  std::vector<double> mean(C), var(C);
  for (int64_t c = 0; c < C; ++c) {
    mean[c] = sums[c] / count;
    var[c] = std::max(0.0, sums[C + c] / count - mean[c] * mean[c]);
  }
  return {std::move(mean), std::move(var)};
}

// running <- (1 - momentum) running + momentum * batch (the variance unbiased), in place.
template <typename T>
void UpdateRunning(const Tensor& running_mean, const Tensor& running_var,
                   const std::vector<double>& mean, const std::vector<double>& var, double count,
                   double momentum) {
  const double unbias = count / (count - 1);
  for (size_t c = 0; c < mean.size(); ++c) {
    if (running_mean.defined()) {
      T& rm = running_mean.data<T>()[c];
      rm = static_cast<T>((1 - momentum) * rm + momentum * mean[c]);
    }
    if (running_var.defined()) {
      T& rv = running_var.data<T>()[c];
      rv = static_cast<T>((1 - momentum) * rv + momentum * var[c] * unbias);
    }
  }
}

template <typename T>
BnStats Statistics(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                   const BnLayout& l, const BatchNormOptions& options) {
  BnStats stats;
  std::vector<double> var;
  if (options.training) {
    stats.count = static_cast<double>(l.count());
    std::tie(stats.mean, var) = options.sync
                                    ? SyncedMoments(x.data<T>(), l, *options.sync, stats.count)
                                    : BatchMoments(x.data<T>(), l);
    UpdateRunning<T>(running_mean, running_var, stats.mean, var, stats.count, options.momentum);
  } else {
    for (int64_t c = 0; c < l.channels; ++c) {
      stats.mean.push_back(running_mean.data<T>()[c]);
      var.push_back(running_var.data<T>()[c]);
    }
  }
  for (double v : var) stats.invstd.push_back(1.0 / std::sqrt(v + options.eps));
  return stats;
}

// y = x * alpha + beta per channel, alpha = invstd * weight, beta = bias - mean * alpha.
template <typename T>
void Normalize(const Tensor& x, const Tensor& weight, const Tensor& bias, const BnStats& s,
               const BnLayout& l, const Tensor& out) {
  const T* in = x.data<T>();
  T* y = out.data<T>();
  for (int64_t i = 0; i < l.n * l.channels; ++i) {
    const int64_t c = i % l.channels;
    const double w = weight.defined() ? weight.data<T>()[c] : 1.0;
    const double b = bias.defined() ? bias.data<T>()[c] : 0.0;
    const T alpha = static_cast<T>(s.invstd[c] * w);
    const T beta = static_cast<T>(b - s.mean[c] * s.invstd[c] * w);
    const T* p = in + i * l.inner;
    T* q = y + i * l.inner;
#pragma omp simd
    for (int64_t k = 0; k < l.inner; ++k) q[k] = p[k] * alpha + beta;
  }
}

struct BnSaved {
  Tensor x, weight;
  BnStats stats;        // on the host
  Tensor mean, invstd;  // on a GPU instead: float64 [C] there
  BnLayout layout;
  bool training, x_grad, w_grad, b_grad;
  std::shared_ptr<BatchNormSync> sync;  // training under SyncBatchNorm only
};

// Per channel: sum(dy) and sum(dy xhat), xhat = (x - mean) invstd (in double, each plane's
// sums vectorised by `omp simd`).
template <typename T>
[[gnu::always_inline]] inline void BnGradSumsOf(const T* x, const T* g, const BnLayout& l,
                                                const double* mean, const double* invstd,
                                                double* sum_dy, double* sum_dy_xhat) {
  for (int64_t i = 0; i < l.n * l.channels; ++i) {
    const int64_t c = i % l.channels;
    const T* p = x + i * l.inner;
    const T* q = g + i * l.inner;
    const double m = mean[c];
    double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
    for (int64_t k = 0; k < l.inner; ++k) {
      a += q[k];
      b += q[k] * (p[k] - m);
    }
    sum_dy[c] += a;
    sum_dy_xhat[c] += b * invstd[c];
  }
}

// dx = scale (dy - mean_dy - xhat proj) per channel, from coefficients computed in double:
// mean, invstd, scale, scale mean_dy, scale proj.
constexpr int64_t kBnCoefficients = 5;
template <typename T>
[[gnu::always_inline]] inline void BnGradInputOf(const T* x, const T* g, const BnLayout& l,
                                                 const T* coefficients, T* dx) {
  for (int64_t i = 0; i < l.n * l.channels; ++i) {
    const T* c = coefficients + kBnCoefficients * (i % l.channels);
    const T* p = x + i * l.inner;
    const T* q = g + i * l.inner;
    T* o = dx + i * l.inner;
    const T mean = c[0], invstd = c[1], scale = c[2], shift = c[3], proj = c[4];
#pragma omp simd
    for (int64_t k = 0; k < l.inner; ++k) {
      o[k] = scale * q[k] - shift - proj * ((p[k] - mean) * invstd);
    }
  }
}

// The float32 loops once per ISA level (vec_math.h).
DDPKIT_VECTOR_CLONES void BnGradSumsFloat(const float* x, const float* g, const BnLayout& l,
                                          const double* mean, const double* invstd, double* sum_dy,
                                          double* sum_dy_xhat) {
  BnGradSumsOf(x, g, l, mean, invstd, sum_dy, sum_dy_xhat);
}
DDPKIT_VECTOR_CLONES void BnGradInputFloat(const float* x, const float* g, const BnLayout& l,
                                           const float* coefficients, float* dx) {
  BnGradInputOf(x, g, l, coefficients, dx);
}

// This rank's per-channel sums: [sum(dy) (C), sum(dy xhat) (C)].
template <typename T>
std::vector<double> GradientSums(const BnSaved& s, const Tensor& dy) {
  const BnLayout& l = s.layout;
  std::vector<double> sums(2 * l.channels, 0.0);
  const T* x = s.x.data<T>();
  const T* g = dy.data<T>();
  const double* mean = s.stats.mean.data();
  const double* invstd = s.stats.invstd.data();
  if constexpr (std::is_same_v<T, float>) {
    BnGradSumsFloat(x, g, l, mean, invstd, sums.data(), sums.data() + l.channels);
  } else {
    BnGradSumsOf(x, g, l, mean, invstd, sums.data(), sums.data() + l.channels);
  }
  return sums;
}

// dx = weight invstd (dy - [training] (sum(dy) + xhat sum(dy xhat)) / count), `sums` as
// GradientSums' (every rank's under SyncBatchNorm, with the count every rank's too).
template <typename T>
Tensor InputGradient(const BnSaved& s, const Tensor& dy, const std::vector<double>& sums) {
  const BnLayout& l = s.layout;
  Tensor dx = Tensor::Uninitialized(s.x.shape(), dy.dtype(), Device::Cpu());
  std::vector<T> coefficients(kBnCoefficients * l.channels);
  for (int64_t c = 0; c < l.channels; ++c) {
    const double invstd = s.stats.invstd[c];
    const double scale = invstd * (s.weight.defined() ? s.weight.data<T>()[c] : 1.0);
    T* k = coefficients.data() + kBnCoefficients * c;
    k[0] = T(s.stats.mean[c]);
    k[1] = T(invstd);
    k[2] = T(scale);
    k[3] = T(s.training ? scale * sums[c] / s.stats.count : 0.0);
    k[4] = T(s.training ? scale * sums[l.channels + c] / s.stats.count : 0.0);
  }
  if constexpr (std::is_same_v<T, float>) {
    BnGradInputFloat(s.x.data<T>(), dy.data<T>(), l, coefficients.data(), dx.data<T>());
  } else {
    BnGradInputOf(s.x.data<T>(), dy.data<T>(), l, coefficients.data(), dx.data<T>());
  }
  return dx;
}

// dweight = sum(dy xhat) and dbias = sum(dy), this rank's own (DDP averages them); dx from the
// sums over every rank when synced.
template <typename T>
TensorList BnBackward(const BnSaved& s, const Tensor& dy) {
  const int64_t C = s.layout.channels;
  std::vector<double> sums = GradientSums<T>(s, dy);
  auto channel_tensor = [&](int64_t first) {
    return Tensor::FromVector<T>(std::vector<T>(sums.begin() + first, sums.begin() + first + C),
                                 {C});
  };
  Tensor dx, dw, db;
  if (s.w_grad) dw = channel_tensor(C);
  if (s.b_grad) db = channel_tensor(0);
  if (s.x_grad) {
    if (s.sync) s.sync->SumAcrossRanks(sums, "the gradient sums (sum dy, sum dy*xhat per channel)");
    dx = InputGradient<T>(s, dy, sums);
  }
  return {dx, dw, db};
}

// The GPU path's statistics (float64 [C] on x's GPU), with the running ones updated in training,
// and the output.
std::pair<Tensor, Tensor> GpuForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Tensor& running_mean, const Tensor& running_var,
                                     const BatchNormOptions& options, const Tensor& out) {
  Tensor mean = Tensor::Uninitialized({x.size(1)}, DType::kFloat64, x.device());
  Tensor invstd = Tensor::Uninitialized({x.size(1)}, DType::kFloat64, x.device());
  if constexpr (kWithCuda) {
    cuda::BatchNormStatistics(x, running_mean, running_var, options.training, options.momentum,
                              options.eps, mean, invstd);
    cuda::BatchNormApply(x, weight, bias, mean, invstd, out);
  }
  return {mean, invstd};
}

TensorList GpuBackward(const BnSaved& s, const Tensor& dy) {
  const int64_t C = s.layout.channels;
  const Device device = dy.device();
  Tensor dx = s.x_grad ? Tensor::Uninitialized(s.x.shape(), dy.dtype(), device) : Tensor();
  Tensor dw = s.w_grad ? Tensor::Uninitialized({C}, dy.dtype(), device) : Tensor();
  Tensor db = s.b_grad ? Tensor::Uninitialized({C}, dy.dtype(), device) : Tensor();
  if constexpr (kWithCuda) {
    cuda::BatchNormBackward(s.x, dy, s.weight, s.mean, s.invstd, s.training, dx, dw, db);
  }
  return {dx, dw, db};
}

}  // namespace

// ---------------------------------------------------------------------------- batch_norm
Tensor BatchNorm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                 const Tensor& running_mean, const Tensor& running_var,
                 const BatchNormOptions& options) {
  const BnLayout layout = CheckBatchNorm(x, {weight, bias, running_mean, running_var}, options);
  Tensor out = Tensor::Uninitialized(x.shape(), x.dtype(), x.device());
  BnStats stats;
  stats.count = static_cast<double>(layout.count());
  Tensor mean, invstd;
  if (x.is_cuda()) {
    std::tie(mean, invstd) = GpuForward(x, weight, bias, running_mean, running_var, options, out);
  } else {
    stats = DispatchFloating(x.dtype(), "batch_norm", [&]<typename T>() {
      BnStats s = Statistics<T>(x, running_mean, running_var, layout, options);
      Normalize<T>(x, weight, bias, s, layout, out);
      return s;
    });
  }
  // PyTorch's NativeBatchNormBackward0 has edges (input, weight, bias).
  RecordOp(out, "NativeBatchNormBackward", {&x, &weight, &bias},
           [s = BnSaved{.x = x.Detach(),
                        .weight = weight.defined() ? weight.Detach() : Tensor(),
                        .stats = std::move(stats),
                        .mean = mean,
                        .invstd = invstd,
                        .layout = layout,
                        .training = options.training,
                        .x_grad = x.requires_grad(),
                        .w_grad = weight.defined() && weight.requires_grad(),
                        .b_grad = bias.defined() && bias.requires_grad(),
                        .sync = options.training ? options.sync : nullptr}](const Tensor& dy) {
             if (dy.is_cuda()) return GpuBackward(s, dy);
             return DispatchFloating(dy.dtype(), "batch_norm_backward",
                                     [&]<typename T>() { return BnBackward<T>(s, dy); });
           });
  return out;
}

}  // namespace ddpkit
