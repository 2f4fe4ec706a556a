#include "reducer/extras/orthogonalize.h"

#include <algorithm>
#include <cmath>
#include <vector>

// LAPACK's Fortran entry points, exported by OpenBLAS (Debian ships no LAPACKE header with it).
extern "C" {
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work,
             const int* lwork, int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda, const float* tau,
             float* work, const int* lwork, int* info);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work,
             const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau,
             double* work, const int* lwork, int* info);
}

namespace ddpkit::reducer {
namespace {

void CheckShape(std::string_view op, const Tensor& matrix) {
  DDPKIT_CHECK(matrix.dim() == 2 && matrix.size(1) <= matrix.size(0), "[", op,
               "] expects an n x r matrix with r <= n, got ", ShapeString(matrix.shape()));
}

template <typename T>
void GramSchmidtImpl(T* a, int64_t n, int64_t r, double epsilon) {
  for (int64_t i = 0; i < r; ++i) {
    double squares = 0;
    for (int64_t k = 0; k < n; ++k) squares += static_cast<double>(a[k * r + i]) * a[k * r + i];
    // As PyTorch: a division (not a product with the reciprocal); 0/0 is NaN when epsilon is 0.
    const T norm = static_cast<T>(static_cast<T>(std::sqrt(squares)) + epsilon);
    for (int64_t k = 0; k < n; ++k) a[k * r + i] /= norm;
    for (int64_t j = i + 1; j < r; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += static_cast<double>(a[k * r + i] * a[k * r + j]);
      const T projection = static_cast<T>(dot);
      for (int64_t k = 0; k < n; ++k) a[k * r + j] -= projection * a[k * r + i];
    }
  }
}

void Geqrf(int m, int n, float* a, float* tau, float* work, int lwork, int* info) {
  sgeqrf_(&m, &n, a, &m, tau, work, &lwork, info);
}
void Geqrf(int m, int n, double* a, double* tau, double* work, int lwork, int* info) {
  dgeqrf_(&m, &n, a, &m, tau, work, &lwork, info);
}
void Orgqr(int m, int n, float* a, const float* tau, float* work, int lwork, int* info) {
  sorgqr_(&m, &n, &n, a, &m, tau, work, &lwork, info);
}
void Orgqr(int m, int n, double* a, const double* tau, double* work, int lwork, int* info) {
  dorgqr_(&m, &n, &n, a, &m, tau, work, &lwork, info);
}

// LAPACK works on column-major storage: copy in transposed, factor, form Q, copy back.
template <typename T>
void HouseholderImpl(T* a, int64_t n, int64_t r) {
  constexpr int kBlock = 64;  // generous for geqrf/orgqr's blocked code
  thread_local std::vector<T> column_major, tau, work;
  const int64_t lwork = std::max<int64_t>(1, r) * kBlock;
  if (static_cast<int64_t>(column_major.size()) < n * r) column_major.resize(n * r);
  if (static_cast<int64_t>(tau.size()) < r) tau.resize(r);
  if (static_cast<int64_t>(work.size()) < lwork) work.resize(lwork);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < r; ++j) column_major[j * n + i] = a[i * r + j];
  }
  int info = 0;
  Geqrf(static_cast<int>(n), static_cast<int>(r), column_major.data(), tau.data(), work.data(),
        static_cast<int>(lwork), &info);
  DDPKIT_INTERNAL_CHECK(info == 0, "[HouseholderQ] geqrf failed with info ", info);
  Orgqr(static_cast<int>(n), static_cast<int>(r), column_major.data(), tau.data(), work.data(),
        static_cast<int>(lwork), &info);
  DDPKIT_INTERNAL_CHECK(info == 0, "[HouseholderQ] orgqr failed with info ", info);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < r; ++j) a[i * r + j] = column_major[j * n + i];
  }
}

}  // namespace

void GramSchmidt(const Tensor& matrix, double epsilon) {
  CheckShape("GramSchmidt", matrix);
  DispatchFloating(matrix.dtype(), "GramSchmidt", [&]<typename T>() {
    GramSchmidtImpl(matrix.data<T>(), matrix.size(0), matrix.size(1), epsilon);
  });
}

void HouseholderQ(const Tensor& matrix) {
  CheckShape("HouseholderQ", matrix);
  if (matrix.numel() == 0) return;
  DispatchFloating(matrix.dtype(), "HouseholderQ", [&]<typename T>() {
    HouseholderImpl(matrix.data<T>(), matrix.size(0), matrix.size(1));
  });
}

void Orthogonalize(const Tensor& matrix, double epsilon) {
  if (matrix.dim() == 2 && matrix.size(1) <= 2) {
    GramSchmidt(matrix, epsilon);
  } else {
    HouseholderQ(matrix);
  }
}

}  // namespace ddpkit::reducer
