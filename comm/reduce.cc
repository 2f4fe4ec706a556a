#include "comm/reduce.h"

#include <algorithm>

#include "autograd/base/error.h"
#include "autograd/half_convert.h"

namespace ddpkit::comm {
namespace {

template <typename T>
T Combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return a + b;
    case ReduceOp::kMin: return std::min(a, b);
    case ReduceOp::kMax: return std::max(a, b);
  }
  return a;
}

template <typename T>
void ReduceNative(T* dst, const T* src, int64_t n, ReduceOp op) {
  switch (op) {  // the op outside the loop so each loop vectorises
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
      return;
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = Combine(dst[i], src[i], op);
  }
}

void ToFloats(const Float16* in, float* out, int64_t n) { HalfToFloat(in, out, n); }
void ToFloats(const BFloat16* in, float* out, int64_t n) { BHalfToFloat(in, out, n); }
void FromFloats(const float* in, Float16* out, int64_t n) { FloatToHalf(in, out, n); }
void FromFloats(const float* in, BFloat16* out, int64_t n) { FloatToBHalf(in, out, n); }

// Half-precision elements combined in float, a block at a time, converted in bulk
// (half_convert.h): the same values as element by element, at vector speed.
constexpr int64_t kHalfBlock = 1024;

template <typename Half>
void ReduceHalf(Half* dst, const Half* src, int64_t n, ReduceOp op) {
  float a[kHalfBlock], b[kHalfBlock];
  for (int64_t begin = 0; begin < n; begin += kHalfBlock) {
    const int64_t len = std::min(kHalfBlock, n - begin);
    ToFloats(dst + begin, a, len);
    ToFloats(src + begin, b, len);
    ReduceNative(a, b, len, op);
    FromFloats(a, dst + begin, len);
  }
}

template <typename Half>
void DivideHalf(Half* data, int64_t n, int divisor) {
  float a[kHalfBlock];
  for (int64_t begin = 0; begin < n; begin += kHalfBlock) {
    const int64_t len = std::min(kHalfBlock, n - begin);
    ToFloats(data + begin, a, len);
    for (int64_t i = 0; i < len; ++i) a[i] /= static_cast<float>(divisor);
    FromFloats(a, data + begin, len);
  }
}

template <typename T>
void ReduceRankOrderNative(const std::vector<const void*>& inputs, T* out, int64_t n, ReduceOp op) {
  constexpr int64_t kBlock = 2048;  // stays in L1 while every input is folded in
  T block[kBlock];
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t len = std::min(kBlock, n - begin);
    const T* first = static_cast<const T*>(inputs[0]) + begin;
    std::copy(first, first + len, block);
    for (size_t r = 1; r < inputs.size(); ++r) {
      ReduceNative(block, static_cast<const T*>(inputs[r]) + begin, len, op);
    }
    std::copy(block, block + len, out + begin);
  }
}

}  // namespace

void ReduceRankOrder(const std::vector<const void*>& inputs, void* out, int64_t n, DType dtype,
                     ReduceOp op) {
  switch (dtype) {
    case DType::kFloat32: return ReduceRankOrderNative(inputs, static_cast<float*>(out), n, op);
    case DType::kFloat64: return ReduceRankOrderNative(inputs, static_cast<double*>(out), n, op);
    case DType::kInt32: return ReduceRankOrderNative(inputs, static_cast<int32_t*>(out), n, op);
    case DType::kInt64: return ReduceRankOrderNative(inputs, static_cast<int64_t*>(out), n, op);
    default: throw Error(StrCat("[ReduceRankOrder] needs a native dtype, got ", DTypeName(dtype)));
  }
}

void ReduceInto(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kFloat32:
      return ReduceNative(static_cast<float*>(dst), static_cast<const float*>(src), n, op);
    case DType::kFloat64:
      return ReduceNative(static_cast<double*>(dst), static_cast<const double*>(src), n, op);
    case DType::kInt32:
      return ReduceNative(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n, op);
    case DType::kInt64:
      return ReduceNative(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n, op);
    case DType::kFloat16:
      return ReduceHalf(static_cast<Float16*>(dst), static_cast<const Float16*>(src), n, op);
    case DType::kBFloat16:
      return ReduceHalf(static_cast<BFloat16*>(dst), static_cast<const BFloat16*>(src), n, op);
  }
}

void DivideInPlace(void* data, int64_t n, DType dtype, int divisor) {
  switch (dtype) {
    case DType::kFloat32: {
      float* p = static_cast<float*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] /= static_cast<float>(divisor);
      return;
    }
    case DType::kFloat64: {
      double* p = static_cast<double*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] /= divisor;
      return;
    }
    case DType::kFloat16: return DivideHalf(static_cast<Float16*>(data), n, divisor);
    case DType::kBFloat16: return DivideHalf(static_cast<BFloat16*>(data), n, divisor);
    default:
      throw Error(
          StrCat("[DivideInPlace] AVG needs a floating-point dtype, got ", DTypeName(dtype)));
  }
}

}  // namespace ddpkit::comm
