#include "autograd/half_convert.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define DDPKIT_HAVE_F16C_PATH 1
#endif

namespace ddpkit {
namespace {

#ifdef DDPKIT_HAVE_F16C_PATH
// Eight at a time with F16C (rounding: to nearest even), the remainder one by one.
__attribute__((target("avx,f16c"))) void FloatToHalfF16c(const float* in, Float16* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = ToFloat16(in[i]);
}

__attribute__((target("avx,f16c"))) void HalfToFloatF16c(const Float16* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = ToFloat(in[i]);
}

// CPUID leaf 1 (F16C, AVX, and the OS saving AVX state: XGETBV's bits 1 and 2). Asked directly:
// not every compiler's __builtin_cpu_supports knows "f16c".
bool HasF16c() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    if ((ecx & bit_OSXSAVE) == 0 || (ecx & bit_AVX) == 0 || (ecx & bit_F16C) == 0) return false;
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;
  }();
  return has;
}
#endif

}  // namespace

void FloatToHalf(const float* in, Float16* out, int64_t n) {
#ifdef DDPKIT_HAVE_F16C_PATH
  if (HasF16c()) return FloatToHalfF16c(in, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = ToFloat16(in[i]);
}

void HalfToFloat(const Float16* in, float* out, int64_t n) {
#ifdef DDPKIT_HAVE_F16C_PATH
  if (HasF16c()) return HalfToFloatF16c(in, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = ToFloat(in[i]);
}

void FloatToBHalf(const float* in, BFloat16* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = ToBFloat16(in[i]);
}

void BHalfToFloat(const BFloat16* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = ToFloat(in[i]);
}

}  // namespace ddpkit
