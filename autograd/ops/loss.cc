// log_softmax, cross-entropy and mean squared error.
#include <algorithm>
#include <cmath>
#include <limits>

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

}  // namespace

// ---------------------------------------------------------------------------- log_softmax
Tensor LogSoftmax(const Tensor& x) {
  op_util::CheckMatrix("log_softmax", "input", x);
  const int64_t rows = x.size(0), cols = x.size(1);
  Tensor out = Tensor::Empty(x.shape(), x.dtype());
  DispatchFloating(x.dtype(), "log_softmax",
                   [&]<typename T>() { LogSoftmaxRows(x.data<T>(), out.data<T>(), rows, cols); });
  // dx = dy - softmax(x) * rowsum(dy), with softmax = exp(y).
  RecordOp(out, "LogSoftmaxBackward", {&x}, [y = out.Detach(), rows, cols](const Tensor& g) {
    Tensor dx = Tensor::Empty(g.shape(), g.dtype());
    DispatchFloating(g.dtype(), "log_softmax_backward", [&]<typename T>() {
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
    return TensorList{dx};
  });
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
  // Resolve each row's class once; forward and backward both use it.
  std::vector<int64_t> label(rows);
  for (int64_t r = 0; r < rows; ++r) {
    label[r] = targets.data<int64_t>()[r] + options.target_offset;
    DDPKIT_CHECK(label[r] >= 0 && label[r] < classes, "[cross_entropy] row ", r, " has target ",
                 targets.data<int64_t>()[r], " + offset ", options.target_offset, " = ", label[r],
                 ", outside the ", classes, " classes [0, ", classes, ")");
  }
  const double scale = options.reduction == Reduction::kSum ? 1.0
                       : rows == 0 ? std::numeric_limits<double>::quiet_NaN()
                                   : 1.0 / static_cast<double>(rows);

  Tensor log_probs = Tensor::Empty(logits.shape(), logits.dtype());
  double total = 0;
  DispatchFloating(logits.dtype(), "cross_entropy", [&]<typename T>() {
    T* lp = log_probs.data<T>();
    LogSoftmaxRows(logits.data<T>(), lp, rows, classes);
    for (int64_t r = 0; r < rows; ++r) total -= lp[r * classes + label[r]];
  });
  Tensor out = Tensor::Scalar(rows == 0 && options.reduction == Reduction::kMean
                                  ? std::numeric_limits<double>::quiet_NaN()
                                  : total * scale,
                              logits.dtype());
  // d loss / d logits[r] = scale * (softmax(logits[r]) - onehot(label[r])).
  RecordOp(out, "CrossEntropyBackward", {&logits},
           [log_probs, label = std::move(label), scale, rows, classes](const Tensor& g) {
             Tensor dx = Tensor::Empty(log_probs.shape(), g.dtype());
             DispatchFloating(g.dtype(), "cross_entropy_backward", [&]<typename T>() {
               const T factor = static_cast<T>(g.item() * scale);
               const T* lp = log_probs.data<T>();
               T* o = dx.data<T>();
               for (int64_t r = 0; r < rows; ++r) {
                 for (int64_t c = 0; c < classes; ++c) {
                   o[r * classes + c] = factor * std::exp(lp[r * classes + c]);
                 }
                 o[r * classes + label[r]] -= factor;
               }
             });
             return TensorList{dx};
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
