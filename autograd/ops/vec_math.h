// exp and erf for float32 loops that the compiler can vectorise. The build targets baseline
// x86-64 without -ffast-math, so GCC calls libm's scalar expf/erff one element at a time (a
// GPT step spent a fifth of its time in erff); these are branch-free polynomials, as PyTorch's
// own vectorised kernels use (Vectorized<float>::exp is Cephes', ::erf is Abramowitz and
// Stegun 7.1.26), and DDPKIT_VECTOR_CLONES compiles a loop once per ISA level (AVX-512, AVX2,
// baseline) picked at load time. float64 keeps libm (the finite-difference checks run there).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define DDPKIT_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DDPKIT_VECTOR_CLONES
#endif

namespace ddpkit::vec {

// e^x within 2 ulp for x in [-87.3, 88.37] (Cephes' range); 0 below, +inf above, NaN kept.
[[gnu::always_inline]] inline float Exp(float x) {
  // Ternaries, not fmin/fmax: without -ffast-math those stay libm calls and block vectorising.
  const float low = x < -87.3f ? -87.3f : x, clamped = low > 88.37f ? 88.37f : low;
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (std::floor stays a libm call, as above).
  const float n = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = clamped - n * 0.693359375f + n * 2.12194440e-4f;  // ln 2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  const float y = x < -87.3f ? 0.0f : (x > 88.37f ? INFINITY : e * scale);
  return x != x ? x : y;
}

// erf(x) within 1.5e-7 absolute.
[[gnu::always_inline]] inline float Erf(float x) {
  const float a = std::fabs(x);
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  return std::copysign(1.0f - p * t * Exp(-a * a), x);
}

}  // namespace ddpkit::vec
