// OpenBLAS: float64 always, float32 when DDPKIT_GEMM=openblas. Debian builds it with DYNAMIC_ARCH:
// it picks kernels by CPU family, and falls back to its Haswell (AVX2) kernels on a core it
// does not know — newer AMD EPYCs among them (docs/performance.md).
#include <cblas.h>

#include "autograd/blas/backends.h"
#include "autograd/pointwise.h"

namespace ddpkit::blas {

void OpenBlasGemm(DType dtype, const GemmArgs& g, double alpha, double beta) {
  const CBLAS_TRANSPOSE ta = g.transpose_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = g.transpose_b ? CblasTrans : CblasNoTrans;
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  const int lda = g.transpose_a ? m : k;
  const int ldb = g.transpose_b ? k : n;
  if (dtype == DType::kFloat32) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(alpha),
                static_cast<const float*>(g.a), lda, static_cast<const float*>(g.b), ldb,
                static_cast<float>(beta), static_cast<float*>(g.c), n);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, static_cast<const double*>(g.a), lda,
                static_cast<const double*>(g.b), ldb, beta, static_cast<double*>(g.c), n);
  }
}

namespace {

template <typename T>
void BiasAct(int64_t m, int64_t n, T* c, const T* bias, bool relu) {
  for (int64_t i = 0; i < m; ++i) {
    T* row = c + i * n;
    if (bias != nullptr) {
      for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
    }
    if (relu) {
      for (int64_t j = 0; j < n; ++j) row[j] = pointwise::ReluFn{}(row[j]);
    }
  }
}

}  // namespace

void BiasActInPlace(DType dtype, int64_t m, int64_t n, void* c, const void* bias, bool relu) {
  if (dtype == DType::kFloat32) {
    BiasAct(m, n, static_cast<float*>(c), static_cast<const float*>(bias), relu);
  } else {
    BiasAct(m, n, static_cast<double*>(c), static_cast<const double*>(bias), relu);
  }
}

}  // namespace ddpkit::blas
