#include "comm/reduce.h"

#include <algorithm>

#include "autograd/base/error.h"

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

template <typename Half>
void ReduceHalf(Half* dst, const Half* src, int64_t n, ReduceOp op) {
  for (int64_t i = 0; i < n; ++i) {
    const float value = Combine(ToFloat(dst[i]), ToFloat(src[i]), op);
    if constexpr (std::is_same_v<Half, Float16>)
      dst[i] = ToFloat16(value);
    else
      dst[i] = ToBFloat16(value);
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
    case DType::kFloat16: {
      Float16* p = static_cast<Float16*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] = ToFloat16(ToFloat(p[i]) / static_cast<float>(divisor));
      return;
    }
    case DType::kBFloat16: {
      BFloat16* p = static_cast<BFloat16*>(data);
      for (int64_t i = 0; i < n; ++i)
        p[i] = ToBFloat16(ToFloat(p[i]) / static_cast<float>(divisor));
      return;
    }
    default:
      throw Error(
          StrCat("[DivideInPlace] AVG needs a floating-point dtype, got ", DTypeName(dtype)));
  }
}

}  // namespace ddpkit::comm
