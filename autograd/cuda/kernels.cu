// The GPU side of autograd/kernels.cc, and Tensor::Fill / converting CopyFrom.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "autograd/cuda/kernels.h"
#include "autograd/cuda/launch.cuh"

namespace ddpkit::cuda {
namespace {

// Element i of raw storage of `dtype`, as double, and back (as tensor.cc's host versions).
__device__ double Load(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<const float*>(base)[i];
    case DType::kFloat64: return static_cast<const double*>(base)[i];
    case DType::kFloat16: return __half2float(static_cast<const __half*>(base)[i]);
    case DType::kBFloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::kInt32: return static_cast<const int32_t*>(base)[i];
    case DType::kInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
  }
  return 0;
}

__device__ void Store(void* base, DType dtype, int64_t i, double v) {
  switch (dtype) {
    case DType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case DType::kFloat64: static_cast<double*>(base)[i] = v; return;
    case DType::kFloat16:
      static_cast<__half*>(base)[i] = __float2half_rn(static_cast<float>(v));
      return;
    case DType::kBFloat16:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(static_cast<float>(v));
      return;
    case DType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); return;
    case DType::kInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); return;
  }
}

}  // namespace

// Extended __device__ lambdas cannot live in a generic lambda, so each kernel is a function
// template and IsDouble picks the instantiation.
bool IsDouble(DType dtype, std::string_view op) {
  DDPKIT_CHECK(IsComputeType(dtype), "[", op, "] expects float32 or float64, got ",
               DTypeName(dtype));
  return dtype == DType::kFloat64;
}

template <typename T>
void AddInPlaceOf(const Tensor& dst, const Tensor& src, double alpha) {
  T* out = dst.device_data<T>();
  const T* in = src.device_data<T>();
  const T a = static_cast<T>(alpha);
  ForEach(dst.device(), dst.numel(), "AddInPlace",
          [=] __device__(int64_t i) { out[i] += a * in[i]; });
}

void AddInPlace(const Tensor& dst, const Tensor& src, double alpha) {
  IsDouble(dst.dtype(), "AddInPlace") ? AddInPlaceOf<double>(dst, src, alpha)
                                      : AddInPlaceOf<float>(dst, src, alpha);
}

template <typename T>
void ScaleInPlaceOf(const Tensor& t, double factor) {
  T* out = t.device_data<T>();
  const T f = static_cast<T>(factor);
  ForEach(t.device(), t.numel(), "ScaleInPlace", [=] __device__(int64_t i) { out[i] *= f; });
}

void ScaleInPlace(const Tensor& t, double factor) {
  IsDouble(t.dtype(), "ScaleInPlace") ? ScaleInPlaceOf<double>(t, factor)
                                      : ScaleInPlaceOf<float>(t, factor);
}

template <typename T>
void DivideInPlaceOf(const Tensor& t, double divisor) {
  T* out = t.device_data<T>();
  const T d = static_cast<T>(divisor);
  ForEach(t.device(), t.numel(), "DivideInPlace", [=] __device__(int64_t i) { out[i] /= d; });
}

void DivideInPlace(const Tensor& t, double divisor) {
  IsDouble(t.dtype(), "DivideInPlace") ? DivideInPlaceOf<double>(t, divisor)
                                       : DivideInPlaceOf<float>(t, divisor);
}

template <typename T>
void ScaledCopyOf(const Tensor& dst, const Tensor& src, double factor) {
  T* out = dst.device_data<T>();
  const T* in = src.device_data<T>();
  const T f = static_cast<T>(factor);
  ForEach(dst.device(), dst.numel(), "ScaledCopy",
          [=] __device__(int64_t i) { out[i] = f * in[i]; });
}

void ScaledCopy(const Tensor& dst, const Tensor& src, double factor) {
  IsDouble(dst.dtype(), "ScaledCopy") ? ScaledCopyOf<double>(dst, src, factor)
                                      : ScaledCopyOf<float>(dst, src, factor);
}

void Fill(const Tensor& t, double value) {
  void* out = t.raw_data();
  const DType dtype = t.dtype();
  ForEach(t.device(), t.numel(), "Fill",
          [=] __device__(int64_t i) { Store(out, dtype, i, value); });
}

void ConvertCopy(const Tensor& dst, const Tensor& src) {
  DDPKIT_CHECK(dst.numel() == src.numel() && dst.device() == src.device(), "[CopyFrom] ",
               ShapeString(src.shape()), " on ", src.device().ToString(), " into ",
               ShapeString(dst.shape()), " on ", dst.device().ToString());
  void* out = dst.raw_data();
  const void* in = src.raw_data();
  const DType to = dst.dtype(), from = src.dtype();
  ForEach(dst.device(), dst.numel(), "ConvertCopy",
          [=] __device__(int64_t i) { Store(out, to, i, Load(in, from, i)); });
}

}  // namespace ddpkit::cuda
