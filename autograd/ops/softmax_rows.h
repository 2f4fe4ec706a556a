// Row-wise softmax and its backward on host rows, shared by Softmax (softmax.cc) and the
// attention op (attention.cc), which applies them to each head's score matrix.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace ddpkit::op_util {

// y[j] = exp(x[j] - max) / sum over the row; -inf entries (a causal mask) give 0.
template <typename T>
void SoftmaxRow(const T* x, T* y, int64_t n) {
  T max = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; ++j) max = x[j] > max ? x[j] : max;
  T sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    y[j] = std::exp(x[j] - max);
    sum += y[j];
  }
  for (int64_t j = 0; j < n; ++j) y[j] /= sum;
}

// dx[j] = y[j] * (dy[j] - sum_k dy[k] y[k]), times `scale` (the attention's 1/sqrt(hd), whose
// product came before the softmax). dx may be dy.
template <typename T>
void SoftmaxBackwardRow(const T* y, const T* dy, T* dx, int64_t n, T scale = T(1)) {
  T dot = 0;
  for (int64_t j = 0; j < n; ++j) dot += dy[j] * y[j];
  for (int64_t j = 0; j < n; ++j) dx[j] = scale * y[j] * (dy[j] - dot);
}

}  // namespace ddpkit::op_util
