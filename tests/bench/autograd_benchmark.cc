// Linear forward + backward against a raw float32 GEMM of the same library (autograd/gemm.h),
// measured in the same run; and every GEMM shape of the MLPs docs/performance.md measures, in
// each library, against this core's peak (an FMA loop).
//
//   build/bin/autograd_benchmark                    (one thread: the thread budget of 2 ranks)
//   build/bin/autograd_benchmark --benchmark_filter=Shape
//
// Both report GFLOP/s (decimal). Linear forward+backward does three gemms of the same size
// (y = x W^T, dx = dy W, dW = dy^T x) plus the bias work, so its rate should approach the raw
// GEMM's: the target is within 1.5x.
#include <immintrin.h>

#include "autograd/compute_threads.h"
#include "autograd/gemm.h"
#include "autograd/ops.h"
#include "autograd/random.h"
#include "benchmark/benchmark.h"

namespace ddpkit {
namespace {

constexpr int64_t kSize = 512;

void SetFlops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP"] =
      benchmark::Counter(flops_per_iteration / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_RawSgemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Generator gen(0);
  Tensor a = Tensor::Empty({n, n}), b = Tensor::Empty({n, n}), c = Tensor::Empty({n, n});
  gen.FillUniform(a, -1, 1);
  gen.FillUniform(b, -1, 1);
  for (auto _ : state) {
    Gemm(false, true, n, n, n, 1.0, a, b, 0.0, c);
    benchmark::DoNotOptimize(c.data<float>());
  }
  SetFlops(state, 2.0 * n * n * n);
}
BENCHMARK(BM_RawSgemm)->Arg(kSize)->Unit(benchmark::kMillisecond);

void BM_LinearForwardBackward(benchmark::State& state) {
  const int64_t n = state.range(0);
  Generator gen(0);
  Tensor x = Tensor::Empty({n, n}), w = Tensor::Empty({n, n}), b = Tensor::Empty({n});
  gen.FillUniform(x, -1, 1);
  gen.FillUniform(w, -1, 1);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor grad = Tensor::Full({n, n}, 1.0);
  for (auto _ : state) {
    x.set_grad(Tensor());
    w.set_grad(Tensor());
    b.set_grad(Tensor());
    Tensor y = Linear(x, w, b);
    y.Backward(grad);
    benchmark::DoNotOptimize(w.grad().raw_data());
  }
  SetFlops(state, 3 * 2.0 * n * n * n);
}
BENCHMARK(BM_LinearForwardBackward)->Arg(kSize)->Unit(benchmark::kMillisecond);

// A 3x3, stride-1, padding-1 conv2d forward + backward (input, weight) on [N, C, S, S] -> C
// channels: Args {N, C, S}, the layer shapes of small ResNets (tools/scripts/bench_conv_torch.py
// times PyTorch's oneDNN convolution on the same shapes).
void BM_Conv2dForwardBackward(benchmark::State& state) {
  const int64_t n = state.range(0), c = state.range(1), s = state.range(2);
  Generator gen(0);
  Tensor x = Tensor::Empty({n, c, s, s}), w = Tensor::Empty({c, c, 3, 3});
  gen.FillUniform(x, -1, 1);
  gen.FillUniform(w, -1, 1);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  Tensor grad = Tensor::Full({n, c, s, s}, 1.0);
  for (auto _ : state) {
    x.set_grad(Tensor());
    w.set_grad(Tensor());
    Conv2d(x, w, Tensor(), {1, 1}).Backward(grad);
    benchmark::DoNotOptimize(w.grad().raw_data());
  }
  SetFlops(state, 3 * 2.0 * n * c * c * 9 * s * s);
}
BENCHMARK(BM_Conv2dForwardBackward)
    ->Args({32, 16, 32})
    ->Args({32, 64, 8})
    ->Args({128, 16, 8})
    ->Unit(benchmark::kMillisecond);

// The shapes of the MLPs' GEMMs at their batch sizes: forward x Wᵀ, backward dY W and dYᵀ X.
struct GemmShape {
  const char* name;
  bool ta, tb;
  int64_t m, n, k;
};
constexpr GemmShape kShapes[] = {
    {"fwd_64x2048x784", false, true, 64, 2048, 784},
    {"fwd_64x2048x2048", false, true, 64, 2048, 2048},
    {"dX_64x2048x2048", false, false, 64, 2048, 2048},
    {"dW_2048x2048x64", true, false, 2048, 2048, 64},
    {"dW_2048x784x64", true, false, 2048, 784, 64},
    {"small_fwd_32x128x128", false, true, 32, 128, 128},
    {"small_dW_128x128x32", true, false, 128, 128, 32},
};

void BM_Shape(benchmark::State& state, GemmShape shape, GemmLibrary library) {
  const GemmLibrary saved = CurrentGemmLibrary();
  SetGemmLibrary(library);
  SetComputeThreads(1);
  Generator gen(0);
  Tensor a = Tensor::Empty({shape.m * shape.k}), b = Tensor::Empty({shape.k * shape.n});
  Tensor c = Tensor::Empty({shape.m * shape.n});
  gen.FillUniform(a, -1, 1);
  gen.FillUniform(b, -1, 1);
  for (auto _ : state) {
    Gemm(shape.ta, shape.tb, shape.m, shape.n, shape.k, 1.0, a, b, 0.0, c);
    benchmark::DoNotOptimize(c.raw_data());
  }
  SetFlops(state, 2.0 * shape.m * shape.n * shape.k);
  SetGemmLibrary(saved);
}

// One core's float32 peak: independent FMA chains, as wide as the CPU allows (AVX-512 where it
// has it, else AVX2), so no chain waits on another.
// 12 chains of fused multiply-adds: FMA latency (4 cycles) x 2 FMA units needs at least 8.
__attribute__((target("avx512f"))) double FmaLoop512(int64_t iterations) {
  __m512 acc[12];
  const __m512 init = _mm512_set1_ps(0.5f);
  for (__m512& v : acc) v = init;
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12  // every accumulator in its own register, not in memory
    for (__m512& v : acc) v = _mm512_fmadd_ps(v, init, init);
  }
  double sum = 0;
  // GCC 12's own header warns inside _mm512_reduce_add_ps (an undefined register it sets up with
  // _mm512_undefined_ps; GCC bug 105593, fixed in GCC 13): silenced here, where it is known.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
  for (const __m512& v : acc) sum += _mm512_reduce_add_ps(v);
#pragma GCC diagnostic pop
  return sum;
}
__attribute__((target("avx2,fma"))) double FmaLoop256(int64_t iterations) {
  __m256 acc[12];
  const __m256 init = _mm256_set1_ps(0.5f);
  for (__m256& v : acc) v = init;
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12  // every accumulator in its own register, not in memory
    for (__m256& v : acc) v = _mm256_fmadd_ps(v, init, init);
  }
  double sum = 0;
  for (const __m256& v : acc) sum += _mm256_cvtss_f32(v);
  return sum;
}

void BM_FmaPeak(benchmark::State& state) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int width = avx512 ? 16 : 8;
  constexpr int64_t kIterations = 1 << 20;
  for (auto _ : state) {
    benchmark::DoNotOptimize(avx512 ? FmaLoop512(kIterations) : FmaLoop256(kIterations));
  }
  SetFlops(state, 2.0 * width * 12 * kIterations);
  state.SetLabel(avx512 ? "avx512 fma" : "avx2 fma");
}
BENCHMARK(BM_FmaPeak)->Unit(benchmark::kMillisecond);

int RegisterShapes() {
  for (const GemmShape& shape : kShapes) {
    for (GemmLibrary library : {GemmLibrary::kOneDnn, GemmLibrary::kOpenBlas}) {
      benchmark::RegisterBenchmark(
          StrCat("BM_Shape/", shape.name, "/", GemmLibraryName(library)).c_str(), BM_Shape, shape,
          library)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  return 0;
}
const int kRegistered = RegisterShapes();

}  // namespace
}  // namespace ddpkit

BENCHMARK_MAIN();
