#include "autograd/kernels.h"

#include <cblas.h>

#include "autograd/cuda/kernels.h"

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
    const int64_t n = dst.numel();
    if (alpha == 1.0) {
      for (int64_t i = 0; i < n; ++i) out[i] += in[i];
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] += a * in[i];
    }
  });
}

void ScaleInPlace(const Tensor& t, double factor) {
  if constexpr (kWithCuda) {
    if (t.is_cuda()) return cuda::ScaleInPlace(t, factor);
  }
  DispatchFloating(t.dtype(), "ScaleInPlace", [&]<typename T>() {
    T* out = t.data<T>();
    const T f = static_cast<T>(factor);
    for (int64_t i = 0, n = t.numel(); i < n; ++i) out[i] *= f;
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
    for (int64_t i = 0, n = dst.numel(); i < n; ++i) out[i] = f * in[i];
  });
}

void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
          const Tensor& a, const Tensor& b, double beta, const Tensor& c) {
  DDPKIT_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype(),
               "[Gemm] dtypes differ: ", DTypeName(a.dtype()), ", ", DTypeName(b.dtype()), ", ",
               DTypeName(c.dtype()));
  DDPKIT_CHECK(a.numel() == m * k && b.numel() == k * n && c.numel() == m * n,
               "[Gemm] operand sizes do not match m=", m, " n=", n, " k=", k);
  if constexpr (kWithCuda) {
    if (c.is_cuda()) return cuda::Gemm(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c);
  }
  if (m == 0 || n == 0) return;
  const CBLAS_TRANSPOSE ta = transpose_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = transpose_b ? CblasTrans : CblasNoTrans;
  const int lda = static_cast<int>(transpose_a ? m : k);
  const int ldb = static_cast<int>(transpose_b ? k : n);
  if (k == 0) {  // BLAS implementations differ on k == 0; the answer is beta * C
    beta == 0.0 ? c.Zero() : ScaleInPlace(c, beta);  // C may be uninitialised when beta is 0
    return;
  }
  if (a.dtype() == DType::kFloat32) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(alpha), a.data<float>(), lda,
                b.data<float>(), ldb, static_cast<float>(beta), c.data<float>(), n);
  } else {
    DDPKIT_CHECK(a.dtype() == DType::kFloat64, "[Gemm] expects float32 or float64, got ",
                 DTypeName(a.dtype()));
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a.data<double>(), lda, b.data<double>(), ldb,
                beta, c.data<double>(), n);
  }
}

bool IsSoleOwner(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.impl()->storage.use_count() == 1 &&
         t.storage_offset() == 0 && t.nbytes() == t.impl()->storage->nbytes();
}

}  // namespace ddpkit
