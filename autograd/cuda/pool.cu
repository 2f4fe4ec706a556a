// The GPU side of ops/pool.cc: one thread per output for the forwards, one thread per input for
// the backwards, which gather the gradients of the outputs whose windows hold that input in the
// host's order (outputs row by row), so the sums are the host's to the bit and need no atomics.
#include <limits>

#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/ops.h"

namespace ddpkit::cuda {
namespace {

__device__ int64_t Max(int64_t a, int64_t b) { return a > b ? a : b; }
__device__ int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }

// The first output index whose window [o * stride - padding, ... + kernel) reaches position i
// (not below 0), and the last one that starts at or before it (not above n - 1).
__device__ int64_t FirstCovering(int64_t i, int64_t kernel, int64_t stride, int64_t padding) {
  const int64_t num = i + padding - kernel + 1;
  return num <= 0 ? 0 : (num + stride - 1) / stride;
}
__device__ int64_t LastCovering(int64_t i, int64_t stride, int64_t padding, int64_t n) {
  return Min((i + padding) / stride, n - 1);
}

template <typename T>
void MaxPoolOf(const Tensor& x, const Pool2dGeometry& g, const Tensor& out, const Tensor& argmax) {
  const T* in = x.device_data<T>();
  T* y = out.device_data<T>();
  int64_t* index = argmax.device_data<int64_t>();
  ForEach(x.device(), out.numel(), "MaxPool2d", [=] __device__(int64_t o) {
    const int64_t ox = o % g.wo, oy = o / g.wo % g.ho, p = o / (g.wo * g.ho);
    const int64_t y0 = Max(oy * g.stride - g.padding, 0);
    const int64_t x0 = Max(ox * g.stride - g.padding, 0);
    const int64_t y1 = Min(oy * g.stride - g.padding + g.kernel, g.h);
    const int64_t x1 = Min(ox * g.stride - g.padding + g.kernel, g.w);
    const T* plane = in + p * g.h * g.w;
    int64_t best = y0 * g.w + x0;
    T best_value = -std::numeric_limits<T>::infinity();
    for (int64_t iy = y0; iy < y1; ++iy) {
      for (int64_t ix = x0; ix < x1; ++ix) {
        const T v = plane[iy * g.w + ix];
        if (v > best_value || v != v) best_value = v, best = iy * g.w + ix;  // NaN wins
      }
    }
    y[o] = best_value;
    index[o] = best;
  });
}

template <typename T>
void MaxPoolBackwardOf(const Tensor& dy, const Tensor& argmax, const Pool2dGeometry& g,
                       const Tensor& dx) {
  const T* grad = dy.device_data<T>();
  const int64_t* index = argmax.device_data<int64_t>();
  T* out = dx.device_data<T>();
  ForEach(dy.device(), dx.numel(), "MaxPool2dBackward", [=] __device__(int64_t i) {
    const int64_t r = i % (g.h * g.w), p = i / (g.h * g.w), iy = r / g.w, ix = r % g.w;
    const int64_t oy1 = LastCovering(iy, g.stride, g.padding, g.ho);
    const int64_t ox1 = LastCovering(ix, g.stride, g.padding, g.wo);
    T sum = 0;
    for (int64_t oy = FirstCovering(iy, g.kernel, g.stride, g.padding); oy <= oy1; ++oy) {
      for (int64_t ox = FirstCovering(ix, g.kernel, g.stride, g.padding); ox <= ox1; ++ox) {
        const int64_t o = (p * g.ho + oy) * g.wo + ox;
        if (index[o] == r) sum += grad[o];
      }
    }
    out[i] = sum;
  });
}

// PyTorch's adaptive windows (ops/pool.cc): output i of n over an axis of `in` covers
// [floor(i * in / n), ceil((i + 1) * in / n)).
__device__ int64_t WindowStart(int64_t i, int64_t n, int64_t in) { return i * in / n; }
__device__ int64_t WindowEnd(int64_t i, int64_t n, int64_t in) {
  return ((i + 1) * in + n - 1) / n;
}

template <typename T>
void AdaptiveAvgPoolOf(const Tensor& x, const Pool2dGeometry& g, const Tensor& out) {
  const T* in = x.device_data<T>();
  T* y = out.device_data<T>();
  ForEach(x.device(), out.numel(), "AdaptiveAvgPool2d", [=] __device__(int64_t o) {
    const int64_t ox = o % g.wo, oy = o / g.wo % g.ho, p = o / (g.wo * g.ho);
    const int64_t y0 = WindowStart(oy, g.ho, g.h), y1 = WindowEnd(oy, g.ho, g.h);
    const int64_t x0 = WindowStart(ox, g.wo, g.w), x1 = WindowEnd(ox, g.wo, g.w);
    double sum = 0;
    for (int64_t iy = y0; iy < y1; ++iy) {
      for (int64_t ix = x0; ix < x1; ++ix) sum += in[(p * g.h + iy) * g.w + ix];
    }
    y[o] = static_cast<T>(sum / static_cast<double>((y1 - y0) * (x1 - x0)));
  });
}

// Input i gets dy[o] / (window size) from each output o whose window holds it. The windows
// holding row iy are those of outputs floor(iy * ho / h) .. ceil((iy + 1) * ho / h) - 1
// (checked again below, as the host's loop would include exactly them).
template <typename T>
void AdaptiveAvgPoolBackwardOf(const Tensor& dy, const Pool2dGeometry& g, const Tensor& dx) {
  const T* grad = dy.device_data<T>();
  T* out = dx.device_data<T>();
  ForEach(dy.device(), dx.numel(), "AdaptiveAvgPool2dBackward", [=] __device__(int64_t i) {
    const int64_t r = i % (g.h * g.w), p = i / (g.h * g.w), iy = r / g.w, ix = r % g.w;
    const int64_t oy1 = Min(((iy + 1) * g.ho + g.h - 1) / g.h, g.ho);
    const int64_t ox1 = Min(((ix + 1) * g.wo + g.w - 1) / g.w, g.wo);
    T sum = 0;
    for (int64_t oy = iy * g.ho / g.h; oy < oy1; ++oy) {
      const int64_t y0 = WindowStart(oy, g.ho, g.h), y1 = WindowEnd(oy, g.ho, g.h);
      if (iy < y0 || iy >= y1) continue;
      for (int64_t ox = ix * g.wo / g.w; ox < ox1; ++ox) {
        const int64_t x0 = WindowStart(ox, g.wo, g.w), x1 = WindowEnd(ox, g.wo, g.w);
        if (ix < x0 || ix >= x1) continue;
        const double count = static_cast<double>((y1 - y0) * (x1 - x0));
        sum += static_cast<T>(grad[(p * g.ho + oy) * g.wo + ox] / count);
      }
    }
    out[i] = sum;
  });
}

}  // namespace

void MaxPool2d(const Tensor& x, const Pool2dGeometry& g, const Tensor& out, const Tensor& argmax) {
  x.dtype() == DType::kFloat64 ? MaxPoolOf<double>(x, g, out, argmax)
                               : MaxPoolOf<float>(x, g, out, argmax);
}

void MaxPool2dBackward(const Tensor& dy, const Tensor& argmax, const Pool2dGeometry& g,
                       const Tensor& dx) {
  dy.dtype() == DType::kFloat64 ? MaxPoolBackwardOf<double>(dy, argmax, g, dx)
                                : MaxPoolBackwardOf<float>(dy, argmax, g, dx);
}

void AdaptiveAvgPool2d(const Tensor& x, const Pool2dGeometry& g, const Tensor& out) {
  x.dtype() == DType::kFloat64 ? AdaptiveAvgPoolOf<double>(x, g, out)
                               : AdaptiveAvgPoolOf<float>(x, g, out);
}

void AdaptiveAvgPool2dBackward(const Tensor& dy, const Pool2dGeometry& g, const Tensor& dx) {
  dy.dtype() == DType::kFloat64 ? AdaptiveAvgPoolBackwardOf<double>(dy, g, dx)
                                : AdaptiveAvgPoolBackwardOf<float>(dy, g, dx);
}

}  // namespace ddpkit::cuda
