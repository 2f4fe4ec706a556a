// Linear forward + backward against a raw float32 GEMM of the same library (autograd/gemm.h),
// measured in the same run.
//
//   build/bin/autograd_benchmark
//
// Both report GFLOP/s (decimal). Linear forward+backward does three gemms of the same size
// (y = x W^T, dx = dy W, dW = dy^T x) plus the bias work, so its rate should approach the raw
// GEMM's: the target is within 1.5x.
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

}  // namespace
}  // namespace ddpkit

BENCHMARK_MAIN();
