// The GPU side of op_util::Map / Zip: one thread per element (grid-stride), running the
// functors of autograd/pointwise.h that the host loops run too.
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/ops.h"
#include "autograd/pointwise.h"

namespace ddpkit::cuda {
namespace {

bool IsDouble(const Tensor& t, std::string_view op) {
  DDPKIT_CHECK(IsComputeType(t.dtype()), "[", op, "] expects float32 or float64, got ",
               DTypeName(t.dtype()));
  return t.dtype() == DType::kFloat64;
}

template <typename T, typename F>
Tensor MapOf(const Tensor& x, F f) {
  Tensor out = Tensor::Empty(x.shape(), x.dtype(), x.device());
  const T* in = x.device_data<T>();
  T* o = out.device_data<T>();
  ForEach(x.device(), x.numel(), "Map", [=] __device__(int64_t i) { o[i] = f(in[i]); });
  return out;
}

template <typename T, typename F>
Tensor ZipOf(const Tensor& a, const Tensor& b, F f) {
  const bool a_scalar = a.numel() == 1 && b.numel() != 1;
  const bool b_scalar = b.numel() == 1 && a.numel() != 1;
  Tensor out = Tensor::Empty(a_scalar ? b.shape() : a.shape(), a.dtype(), a.device());
  const T* x = a.device_data<T>();
  const T* y = b.device_data<T>();
  T* o = out.device_data<T>();
  ForEach(out.device(), out.numel(), "Zip",
          [=] __device__(int64_t i) { o[i] = f(x[a_scalar ? 0 : i], y[b_scalar ? 0 : i]); });
  return out;
}

}  // namespace

template <typename F>
Tensor Map(const Tensor& x, F f) {
  return IsDouble(x, "map") ? MapOf<double>(x, f) : MapOf<float>(x, f);
}

template <typename F>
Tensor Zip(const Tensor& a, const Tensor& b, F f) {
  DDPKIT_CHECK(a.dtype() == b.dtype() && a.device() == b.device(), "[zip] operands are ",
               DTypeName(a.dtype()), " on ", a.device().ToString(), " and ", DTypeName(b.dtype()),
               " on ", b.device().ToString());
  return IsDouble(a, "zip") ? ZipOf<double>(a, b, f) : ZipOf<float>(a, b, f);
}

namespace {

template <typename T>
void AddTrailingOf(const Tensor& x, const Tensor& y, const Tensor& out) {
  const T* a = x.device_data<T>();
  const T* b = y.device_data<T>();
  T* o = out.device_data<T>();
  const int64_t block = y.numel();
  ForEach(x.device(), x.numel(), "AddTrailing",
          [=] __device__(int64_t i) { o[i] = a[i] + b[i % block]; });
}

// Each output element sums its column of blocks in block order (deterministic).
template <typename T>
void SumBlocksOf(const Tensor& g, const Tensor& out) {
  const T* in = g.device_data<T>();
  T* o = out.device_data<T>();
  const int64_t block = out.numel(), blocks = g.numel() / block;
  ForEach(g.device(), block, "SumBlocks", [=] __device__(int64_t j) {
    T sum = 0;
    for (int64_t b = 0; b < blocks; ++b) sum += in[b * block + j];
    o[j] = sum;
  });
}

}  // namespace

void AddTrailing(const Tensor& x, const Tensor& y, const Tensor& out) {
  IsDouble(x, "add_trailing") ? AddTrailingOf<double>(x, y, out) : AddTrailingOf<float>(x, y, out);
}

void SumBlocks(const Tensor& g, const Tensor& out) {
  IsDouble(g, "add_trailing") ? SumBlocksOf<double>(g, out) : SumBlocksOf<float>(g, out);
}

// One instantiation per functor the ops use (op_util::MapOn / ZipOn).
template Tensor Map(const Tensor&, pointwise::ScaleFn);
template Tensor Map(const Tensor&, pointwise::ReluFn);
template Tensor Map(const Tensor&, pointwise::TanhFn);
template Tensor Map(const Tensor&, pointwise::GeluFn);
template Tensor Map(const Tensor&, pointwise::ExpFn);
template Tensor Map(const Tensor&, pointwise::LogFn);
template Tensor Zip(const Tensor&, const Tensor&, pointwise::AddFn);
template Tensor Zip(const Tensor&, const Tensor&, pointwise::SubFn);
template Tensor Zip(const Tensor&, const Tensor&, pointwise::MulFn);
template Tensor Zip(const Tensor&, const Tensor&, pointwise::ReluBackwardFn);
template Tensor Zip(const Tensor&, const Tensor&, pointwise::TanhBackwardFn);
template Tensor Zip(const Tensor&, const Tensor&, pointwise::GeluBackwardFn);
template Tensor Zip(const Tensor&, const Tensor&, pointwise::LogBackwardFn);

}  // namespace ddpkit::cuda
