#include "autograd/kernels.h"

#include "autograd/cuda/kernels.h"
#include "autograd/parallel.h"

namespace ddpkit {
namespace {

void CheckSameLayout(std::string_view op, const Tensor& a, const Tensor& b) {
  DDPKIT_CHECK(a.dtype() == b.dtype() && a.numel() == b.numel() && a.device() == b.device(), "[",
               op, "] ", DTypeName(a.dtype()), ShapeString(a.shape()), " on ",
               a.device().ToString(), " and ", DTypeName(b.dtype()), ShapeString(b.shape()), " on ",
               b.device().ToString(), " differ in dtype, element count or device");
}

}  // namespace

void AddInPlace(const Tensor& dst, const Tensor& src, double alpha) {
  CheckSameLayout("AddInPlace", dst, src);
  if constexpr (kWithCuda) {
    if (dst.is_cuda()) return cuda::AddInPlace(dst, src, alpha);
  }
  DispatchFloating(dst.dtype(), "AddInPlace", [&]<typename T>() {
    T* out = dst.data<T>();
    const T* in = src.data<T>();
    const T a = static_cast<T>(alpha);
    ParallelFor(dst.numel(), [&](int64_t begin, int64_t end) {
      if (alpha == 1.0) {
        for (int64_t i = begin; i < end; ++i) out[i] += in[i];
      } else {
        for (int64_t i = begin; i < end; ++i) out[i] += a * in[i];
      }
    });
  });
}

void ScaleInPlace(const Tensor& t, double factor) {
  if constexpr (kWithCuda) {
    if (t.is_cuda()) return cuda::ScaleInPlace(t, factor);
  }
  DispatchFloating(t.dtype(), "ScaleInPlace", [&]<typename T>() {
    T* out = t.data<T>();
    const T f = static_cast<T>(factor);
    ParallelFor(t.numel(), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] *= f;
    });
  });
}

void DivideInPlace(const Tensor& t, double divisor) {
  if constexpr (kWithCuda) {
    if (t.is_cuda()) return cuda::DivideInPlace(t, divisor);
  }
  DispatchFloating(t.dtype(), "DivideInPlace", [&]<typename T>() {
    T* out = t.data<T>();
    const T d = static_cast<T>(divisor);
    ParallelFor(t.numel(), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] /= d;
    });
  });
}

void ScaledCopy(const Tensor& dst, const Tensor& src, double factor) {
  CheckSameLayout("ScaledCopy", dst, src);
  if constexpr (kWithCuda) {
    if (dst.is_cuda()) return cuda::ScaledCopy(dst, src, factor);
  }
  DispatchFloating(dst.dtype(), "ScaledCopy", [&]<typename T>() {
    T* out = dst.data<T>();
    const T* in = src.data<T>();
    const T f = static_cast<T>(factor);
    ParallelFor(dst.numel(), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = f * in[i];
    });
  });
}

bool IsSoleOwner(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.impl()->storage.use_count() == 1 &&
         t.storage_offset() == 0 && t.nbytes() == t.impl()->storage->nbytes();
}

}  // namespace ddpkit
