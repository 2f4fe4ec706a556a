// Reductions of device buffers for the threads world on a GPU (comm/cuda/reduce.h). The order
// of combination is the host's (rank order), so a GPU threads world sums exactly as the CPU one.
#include "autograd/cuda/launch.cuh"
#include "comm/cuda/reduce.h"

namespace ddpkit::cuda {
namespace {

using comm::ReduceOp;

template <typename T>
__device__ T Combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return a + b;
    case ReduceOp::kMin: return b < a ? b : a;
    case ReduceOp::kMax: return a < b ? b : a;
  }
  return a;
}

struct Inputs {
  const void* at[kMaxRankOrderInputs];
  int count;
};

template <typename T>
void ReduceIntoOf(void* dst, const void* src, int64_t n, ReduceOp op, Device device) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  ForEach(device, n, "ReduceInto", [=] __device__(int64_t i) { d[i] = Combine(d[i], s[i], op); });
}

template <typename T>
void ReduceRankOrderOf(const Inputs inputs, void* out, int64_t n, ReduceOp op, Device device) {
  T* o = static_cast<T*>(out);
  ForEach(device, n, "ReduceRankOrder", [=] __device__(int64_t i) {
    T acc = static_cast<const T*>(inputs.at[0])[i];
    for (int r = 1; r < inputs.count; ++r)
      acc = Combine(acc, static_cast<const T*>(inputs.at[r])[i], op);
    o[i] = acc;
  });
}

template <typename T>
void DivideOf(void* data, int64_t n, int divisor, Device device) {
  T* d = static_cast<T*>(data);
  const T by = static_cast<T>(divisor);
  ForEach(device, n, "DivideInPlace", [=] __device__(int64_t i) { d[i] /= by; });
}

// Calls run.template operator()<T>() for the native dtypes.
template <typename Run>
void Native(DType dtype, std::string_view op, Run run) {
  switch (dtype) {
    case DType::kFloat32: return run.template operator()<float>();
    case DType::kFloat64: return run.template operator()<double>();
    case DType::kInt32: return run.template operator()<int32_t>();
    case DType::kInt64: return run.template operator()<int64_t>();
    default:
      throw Error(StrCat("[", op, "] reduces float32, float64, int32 or int64 on a GPU, got ",
                         DTypeName(dtype), " (halves go through float32)"));
  }
}

}  // namespace

void ReduceInto(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op, Device device) {
  Native(dtype, "ReduceInto", [&]<typename T>() { ReduceIntoOf<T>(dst, src, n, op, device); });
}

void ReduceRankOrder(const std::vector<const void*>& inputs, void* out, int64_t n, DType dtype,
                     ReduceOp op, Device device) {
  DDPKIT_CHECK(!inputs.empty() && inputs.size() <= kMaxRankOrderInputs, "[ReduceRankOrder] ",
               inputs.size(), " inputs; 1 to ", kMaxRankOrderInputs, " fit one kernel");
  Inputs packed{};
  for (size_t r = 0; r < inputs.size(); ++r) packed.at[r] = inputs[r];
  packed.count = static_cast<int>(inputs.size());
  Native(dtype, "ReduceRankOrder",
         [&]<typename T>() { ReduceRankOrderOf<T>(packed, out, n, op, device); });
}

void DivideInPlace(void* data, int64_t n, DType dtype, int divisor, Device device) {
  DDPKIT_CHECK(IsComputeType(dtype), "[DivideInPlace] expects float32 or float64, got ",
               DTypeName(dtype));
  dtype == DType::kFloat64 ? DivideOf<double>(data, n, divisor, device)
                           : DivideOf<float>(data, n, divisor, device);
}

}  // namespace ddpkit::cuda
