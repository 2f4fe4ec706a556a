// log_softmax, cross-entropy and mean squared error.
#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/cuda/ops.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace ddpkit {
namespace {

// Row-wise log-softmax of an [n, c] array into `out` (max-shifted for stability).
template <typename T>
void LogSoftmaxRows(const T* x, T* out, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* in = x + r * cols;
    T* o = out + r * cols;
    const T max = cols > 0 ? *std::max_element(in, in + cols) : T(0);
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(in[c] - max));
    const T log_sum = static_cast<T>(std::log(sum));
    for (int64_t c = 0; c < cols; ++c) o[c] = in[c] - max - log_sum;
  }
}

// out <- log_softmax(x) row by row, on x's device.
void LogSoftmaxInto(const Tensor& x, const Tensor& out) {
  if constexpr (kWithCuda) {
    if (x.is_cuda()) return cuda::LogSoftmaxRows(x, out);
  }
  DispatchFloating(x.dtype(), "log_softmax", [&]<typename T>() {
    LogSoftmaxRows(x.data<T>(), out.data<T>(), x.size(0), x.size(1));
  });
}

// dx = dy - softmax(x) * rowsum(dy), with softmax = exp(y).
Tensor LogSoftmaxGrad(const Tensor& g, const Tensor& y) {
  Tensor dx = Tensor::Empty(g.shape(), g.dtype(), g.device());
  if constexpr (kWithCuda) {
    if (g.is_cuda()) {
      cuda::LogSoftmaxBackward(g, y, dx);
      return dx;
    }
  }
  DispatchFloating(g.dtype(), "log_softmax_backward", [&]<typename T>() {
    const int64_t rows = g.size(0), cols = g.size(1);
    const T* dy = g.data<T>();
    const T* ly = y.data<T>();
    T* o = dx.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      T row_sum = 0;
      for (int64_t c = 0; c < cols; ++c) row_sum += dy[r * cols + c];
      for (int64_t c = 0; c < cols; ++c) {
        o[r * cols + c] = dy[r * cols + c] - std::exp(ly[r * cols + c]) * row_sum;
      }
    }
  });
  return dx;
}

// Each row's class, targets[r] + offset, range-checked on the host; returned on `device`.
Tensor ResolveLabels(const Tensor& targets, int64_t offset, int64_t classes, Device device) {
  const Tensor host = targets.is_cuda() ? targets.To(Device::Cpu()) : targets;
  const int64_t rows = host.numel();
  Tensor labels = Tensor::Empty({rows}, DType::kInt64);
  const int64_t* t = host.data<int64_t>();
  int64_t* label = labels.data<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    label[r] = t[r] + offset;
    DDPKIT_CHECK(label[r] >= 0 && label[r] < classes, "[cross_entropy] row ", r, " has target ",
                 t[r], " + offset ", offset, " = ", label[r], ", outside the ", classes,
                 " classes [0, ", classes, ")");
  }
  return device.is_cuda() ? labels.To(device) : labels;
}

// -scale * sum_r log_probs[r, labels[r]], as a scalar on log_probs' device.
Tensor NllSum(const Tensor& log_probs, const Tensor& labels, double scale) {
  if constexpr (kWithCuda) {
    if (log_probs.is_cuda()) return cuda::NllSum(log_probs, labels, scale);
  }
  double total = 0;
  DispatchFloating(log_probs.dtype(), "cross_entropy", [&]<typename T>() {
    const T* lp = log_probs.data<T>();
    const int64_t* label = labels.data<int64_t>();
    for (int64_t r = 0, classes = log_probs.size(1); r < log_probs.size(0); ++r) {
      total -= lp[r * classes + label[r]];
    }
  });
  return Tensor::Scalar(total * scale, log_probs.dtype());
}

// d loss / d logits[r] = g * scale * (softmax(logits[r]) - onehot(labels[r])).
Tensor CrossEntropyGrad(const Tensor& g, const Tensor& log_probs, const Tensor& labels,
                        double scale) {
  Tensor dx = Tensor::Empty(log_probs.shape(), g.dtype(), g.device());
  if constexpr (kWithCuda) {
    if (g.is_cuda()) {
      cuda::CrossEntropyBackward(g, log_probs, labels, scale, dx);
      return dx;
    }
  }
  DispatchFloating(g.dtype(), "cross_entropy_backward", [&]<typename T>() {
    const T factor = static_cast<T>(g.item() * scale);
    const T* lp = log_probs.data<T>();
    const int64_t* label = labels.data<int64_t>();
    T* o = dx.data<T>();
    for (int64_t r = 0, rows = log_probs.size(0), classes = log_probs.size(1); r < rows; ++r) {
      for (int64_t c = 0; c < classes; ++c) {
        o[r * classes + c] = factor * std::exp(lp[r * classes + c]);
      }
      o[r * classes + label[r]] -= factor;
    }
  });
  return dx;
}

}  // namespace

// ---------------------------------------------------------------------------- log_softmax
Tensor LogSoftmax(const Tensor& x) {
  op_util::CheckMatrix("log_softmax", "input", x);
  Tensor out = Tensor::Empty(x.shape(), x.dtype(), x.device());
  LogSoftmaxInto(x, out);
  RecordOp(out, "LogSoftmaxBackward", {&x},
           [y = out.Detach()](const Tensor& g) { return TensorList{LogSoftmaxGrad(g, y)}; });
  return out;
}

// ---------------------------------------------------------------------------- cross_entropy
Tensor CrossEntropy(const Tensor& logits, const Tensor& targets,
                    const CrossEntropyOptions& options) {
  op_util::CheckMatrix("cross_entropy", "logits", logits);
  DDPKIT_CHECK(targets.defined() && targets.dtype() == DType::kInt64 && targets.dim() == 1,
               "[cross_entropy] targets must be int64 of shape [n], got ", targets.DebugString());
  const int64_t rows = logits.size(0), classes = logits.size(1);
  DDPKIT_CHECK(targets.size(0) == rows, "[cross_entropy] ", rows, " rows of logits but ",
               targets.size(0), " targets");
  op_util::CheckSameDevice("cross_entropy", logits, targets);
  // Resolve each row's class once; forward and backward both use it.
  Tensor labels = ResolveLabels(targets, options.target_offset, classes, logits.device());
  const double scale = options.reduction == Reduction::kSum ? 1.0
                       : rows == 0 ? std::numeric_limits<double>::quiet_NaN()
                                   : 1.0 / static_cast<double>(rows);

  Tensor log_probs = Tensor::Empty(logits.shape(), logits.dtype(), logits.device());
  LogSoftmaxInto(logits, log_probs);
  // An empty batch's mean is NaN (scale), as PyTorch.
  Tensor out = NllSum(log_probs, labels, scale);
  RecordOp(out, "CrossEntropyBackward", {&logits}, [log_probs, labels, scale](const Tensor& g) {
    return TensorList{CrossEntropyGrad(g, log_probs, labels, scale)};
  });
  return out;
}

// ---------------------------------------------------------------------------- mse
Tensor Mse(const Tensor& prediction, const Tensor& target) {
  op_util::CheckBinary("mse", prediction, target);
  DDPKIT_CHECK(prediction.shape() == target.shape(), "[mse] prediction ",
               ShapeString(prediction.shape()), " and target ", ShapeString(target.shape()),
               " differ in shape");
  Tensor diff = Sub(prediction, target);
  return Mean(Mul(diff, diff));
}

}  // namespace ddpkit
