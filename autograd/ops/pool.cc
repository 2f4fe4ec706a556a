// Pooling over NCHW planes (max, adaptive average) and flatten. Each plane (image, channel) is
// pooled on its own; the backward sends each output's gradient to the inputs it read. On a GPU
// the same loops run as CUDA kernels (autograd/cuda/pool.cu).
#include <cmath>
#include <limits>

#include "autograd/cuda/ops.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace ddpkit {
namespace {

void CheckPlanes(const char* op, const Tensor& x) {
  op_util::CheckFloating(op, x);
  DDPKIT_CHECK(x.dim() == 4, "[", op, "] input must be [N, C, H, W], got ", ShapeString(x.shape()));
}

// dx[plane, index[k]] += dy[k] for each output k of a plane of `out_plane` outputs.
template <typename T>
void ScatterByIndex(const T* dy, const int64_t* index, int64_t planes, int64_t out_plane,
                    int64_t in_plane, T* dx) {
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t k = p * out_plane; k < (p + 1) * out_plane; ++k)
      dx[p * in_plane + index[k]] += dy[k];
  }
}

// The flat in-plane index of each output's maximum (the first one on ties, NaN wins, as
// PyTorch's CPU kernel), for the backward.
template <typename T>
void MaxPoolPlanes(const Tensor& x, const cuda::Pool2dGeometry& g, const Tensor& out,
                   const Tensor& argmax) {
  const T* in = x.data<T>();
  T* y = out.data<T>();
  int64_t* index = argmax.data<int64_t>();
  const int64_t k = g.kernel, s = g.stride, pad = g.padding, h = g.h, w = g.w;
  for (int64_t p = 0, o = 0; p < g.planes; ++p) {
    const T* plane = in + p * h * w;
    for (int64_t oy = 0; oy < g.ho; ++oy) {
      for (int64_t ox = 0; ox < g.wo; ++ox, ++o) {
        const int64_t y0 = std::max<int64_t>(oy * s - pad, 0),
                      x0 = std::max<int64_t>(ox * s - pad, 0);
        const int64_t y1 = std::min(oy * s - pad + k, h), x1 = std::min(ox * s - pad + k, w);
        int64_t best = y0 * w + x0;
        T best_value = -std::numeric_limits<T>::infinity();
        for (int64_t iy = y0; iy < y1; ++iy) {
          for (int64_t ix = x0; ix < x1; ++ix) {
            const T v = plane[iy * w + ix];
            if (v > best_value || std::isnan(v)) best_value = v, best = iy * w + ix;
          }
        }
        y[o] = best_value;
        index[o] = best;
      }
    }
  }
}

Tensor MaxPoolBackward(const Tensor& dy, const Tensor& argmax, const cuda::Pool2dGeometry& g,
                       const Shape& shape) {
  if (dy.is_cuda()) {
    Tensor dx = Tensor::Uninitialized(shape, dy.dtype(), dy.device());
    if constexpr (kWithCuda) cuda::MaxPool2dBackward(dy, argmax, g, dx);
    return dx;
  }
  Tensor dx = Tensor::Zeros(shape, dy.dtype());
  DispatchFloating(dy.dtype(), "max_pool2d_backward", [&]<typename T>() {
    ScatterByIndex(dy.data<T>(), argmax.data<int64_t>(), g.planes, g.ho * g.wo, g.h * g.w,
                   dx.data<T>());
  });
  return dx;
}

}  // namespace

// ---------------------------------------------------------------------------- max_pool2d
Tensor MaxPool2d(const Tensor& x, const Pool2dOptions& options) {
  CheckPlanes("max_pool2d", x);
  const int64_t k = options.kernel, s = options.stride > 0 ? options.stride : options.kernel;
  const int64_t pad = options.padding, h = x.size(2), w = x.size(3);
  DDPKIT_CHECK(k >= 1 && pad >= 0 && pad <= k / 2, "[max_pool2d] needs kernel >= 1 and padding ",
               "at most half the kernel, got kernel ", k, " padding ", pad);
  DDPKIT_CHECK(h + 2 * pad >= k && w + 2 * pad >= k, "[max_pool2d] input ", ShapeString(x.shape()),
               " is smaller than the kernel ", k);
  const cuda::Pool2dGeometry g{.planes = x.size(0) * x.size(1),
                               .h = h,
                               .w = w,
                               .ho = (h + 2 * pad - k) / s + 1,
                               .wo = (w + 2 * pad - k) / s + 1,
                               .kernel = k,
                               .stride = s,
                               .padding = pad};
  Tensor out = Tensor::Uninitialized({x.size(0), x.size(1), g.ho, g.wo}, x.dtype(), x.device());
  Tensor argmax = Tensor::Uninitialized({out.numel()}, DType::kInt64, x.device());
  if (x.is_cuda()) {
    if constexpr (kWithCuda) cuda::MaxPool2d(x, g, out, argmax);
  } else {
    DispatchFloating(x.dtype(), "max_pool2d",
                     [&]<typename T>() { MaxPoolPlanes<T>(x, g, out, argmax); });
  }
  // PyTorch's max_pool2d records MaxPool2DWithIndicesBackward0 with the one input edge.
  RecordOp(out, "MaxPool2DWithIndicesBackward", {&x},
           [argmax, g, shape = x.shape()](const Tensor& dy) {
             return TensorList{MaxPoolBackward(dy, argmax, g, shape)};
           });
  return out;
}

namespace {

// PyTorch's adaptive pooling windows: output i of n over a length-`in` axis averages
// [floor(i * in / n), ceil((i + 1) * in / n)).
int64_t WindowStart(int64_t i, int64_t n, int64_t in) { return i * in / n; }
int64_t WindowEnd(int64_t i, int64_t n, int64_t in) { return ((i + 1) * in + n - 1) / n; }

// Forward (Backward false): out[o] = mean of the window of `src`. Backward: dst[window] +=
// src[o] / window size.
template <bool Backward, typename T>
void AdaptiveAverage(const T* src, T* dst, int64_t planes, int64_t h, int64_t w, int64_t ho,
                     int64_t wo) {
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t oy = 0; oy < ho; ++oy) {
      const int64_t y0 = WindowStart(oy, ho, h), y1 = WindowEnd(oy, ho, h);
      for (int64_t ox = 0; ox < wo; ++ox) {
        const int64_t x0 = WindowStart(ox, wo, w), x1 = WindowEnd(ox, wo, w);
        const int64_t o = (p * ho + oy) * wo + ox;
        const double count = static_cast<double>((y1 - y0) * (x1 - x0));
        double sum = 0;
        for (int64_t iy = y0; iy < y1; ++iy) {
          for (int64_t ix = x0; ix < x1; ++ix) {
            const int64_t i = (p * h + iy) * w + ix;
            if constexpr (Backward) {
              dst[i] += static_cast<T>(src[o] / count);
            } else {
              sum += src[i];
            }
          }
        }
        if constexpr (!Backward) dst[o] = static_cast<T>(sum / count);
      }
    }
  }
}

Tensor AdaptiveAvgPoolBackward(const Tensor& dy, const cuda::Pool2dGeometry& g,
                               const Shape& shape) {
  if (dy.is_cuda()) {
    Tensor dx = Tensor::Uninitialized(shape, dy.dtype(), dy.device());
    if constexpr (kWithCuda) cuda::AdaptiveAvgPool2dBackward(dy, g, dx);
    return dx;
  }
  Tensor dx = Tensor::Zeros(shape, dy.dtype());
  DispatchFloating(dy.dtype(), "adaptive_avg_pool2d_backward", [&]<typename T>() {
    AdaptiveAverage<true>(dy.data<T>(), dx.data<T>(), g.planes, g.h, g.w, g.ho, g.wo);
  });
  return dx;
}

}  // namespace

// ---------------------------------------------------------------------------- adaptive_avg_pool2d
Tensor AdaptiveAvgPool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  CheckPlanes("adaptive_avg_pool2d", x);
  DDPKIT_CHECK(out_h >= 1 && out_w >= 1, "[adaptive_avg_pool2d] output size must be positive, ",
               "got ", out_h, "x", out_w);
  const int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
  DDPKIT_CHECK(h >= 1 && w >= 1, "[adaptive_avg_pool2d] empty planes in ", ShapeString(x.shape()));
  const cuda::Pool2dGeometry g{.planes = planes, .h = h, .w = w, .ho = out_h, .wo = out_w};
  Tensor out = Tensor::Uninitialized({x.size(0), x.size(1), out_h, out_w}, x.dtype(), x.device());
  if (x.is_cuda()) {
    if constexpr (kWithCuda) cuda::AdaptiveAvgPool2d(x, g, out);
  } else {
    DispatchFloating(x.dtype(), "adaptive_avg_pool2d", [&]<typename T>() {
      AdaptiveAverage<false>(x.data<T>(), out.data<T>(), planes, h, w, out_h, out_w);
    });
  }
  RecordOp(out, "AdaptiveAvgPool2DBackward", {&x}, [g, shape = x.shape()](const Tensor& dy) {
    return TensorList{AdaptiveAvgPoolBackward(dy, g, shape)};
  });
  return out;
}

// ---------------------------------------------------------------------------- flatten
Tensor Flatten(const Tensor& x, int64_t start_dim) {
  op_util::CheckFloating("flatten", x);
  DDPKIT_CHECK(start_dim >= 0 && start_dim < std::max<int64_t>(x.dim(), 1), "[flatten] start_dim ",
               start_dim, " is outside ", ShapeString(x.shape()));
  Shape shape(x.shape().begin(), x.shape().begin() + start_dim);
  int64_t rest = 1;
  for (int64_t d = start_dim; d < x.dim(); ++d) rest *= x.size(d);
  shape.push_back(rest);
  return Reshape(x, shape);
}

}  // namespace ddpkit
