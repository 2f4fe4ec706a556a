// The GPU side of ops/conv.cc: conv2d and its three gradients through cuDNN's convolution API
// (cudnnConvolutionForward / BackwardData / BackwardFilter / BackwardBias; cuDNN 9 still ships
// it, marked legacy beside the graph API, which would need far more code for the same calls).
//
// Algorithms: cuDNN's heuristics (cudnnGet*Algorithm_v7) rank the candidates for the shape; the
// first that is supported, deterministic (the same bits every run, as every ddpkit kernel) and
// in FMA math (no TF32 for float32, as Gemm) runs, with its workspace from the stream-ordered
// pool. Where the heuristics offer none, a fixed deterministic algorithm that supports every
// shape and both dtypes runs instead: implicit GEMM forward, ALGO_1 for both backwards. No
// benchmarking search (the Find APIs): it would time every candidate on first use of a shape
// and pick by speed alone, possibly a non-deterministic one. The choice is kept per shape, as
// PyTorch keeps its: asking the heuristics costs more host time than a small layer's GPU time.
#include <cudnn.h>

#include <array>
#include <mutex>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "autograd/blas/backends.h"
#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/cudnn.h"
#include "autograd/cuda/ops.h"
#include "autograd/cuda/runtime.h"

namespace ddpkit::cuda {
namespace {

constexpr int kMaxCandidates = 16;

// The descriptors of one convolution: input, output (or their gradients), weight, operator.
struct ConvDescriptors {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  explicit ConvDescriptors(const blas::ConvArgs& a, DType dtype)
      : x(MakeTensorDescriptor(dtype, a.n, a.c, a.h, a.w)),
        y(MakeTensorDescriptor(dtype, a.n, a.o, a.ho, a.wo)),
        w(MakeFilterDescriptor(dtype, a.o, a.c, a.kh, a.kw)),
        conv(MakeConvolutionDescriptor(dtype, a.stride, a.padding)) {}
};

// What every call needs: the GPU current for the scope, this thread's handle, the descriptors.
struct ConvCall {
  Device device;
  DType dtype;
  DeviceScope scope;
  cudnnHandle_t handle;
  ConvDescriptors d;
  ConvCall(const blas::ConvArgs& a, const Tensor& t)
      : device(t.device()),
        dtype(t.dtype()),
        scope(device),
        handle(CudnnHandle(device)),
        d(a, dtype) {}
};

// The first of cuDNN's ranked candidates that is usable, deterministic and free of TF32, or
// `fallback`. Perf is any of the three cudnnConvolution*AlgoPerf_t (they share these fields).
template <typename Perf, typename Algo>
Algo Choose(const Perf* candidates, int count, Algo fallback) {
  for (int i = 0; i < count; ++i) {
    const Perf& p = candidates[i];
    if (p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC &&
        p.mathType == CUDNN_FMA_MATH) {
      return p.algo;
    }
  }
  return fallback;
}

// cuDNN's scaling factors: double for double data, float otherwise.
struct Scale {
  float f32;
  double f64;
  const void* For(DType dtype) const {
    return dtype == DType::kFloat64 ? static_cast<const void*>(&f64)
                                    : static_cast<const void*>(&f32);
  }
};
constexpr Scale kOne{1.0f, 1.0}, kZero{0.0f, 0.0};

// One call's shape: which cuDNN call (its name), the GPU, the dtype and the convolution.
struct PlanKey {
  std::string_view call;  // one of the literal names below
  int device;
  DType dtype;
  std::array<int64_t, 11> args;
  bool operator==(const PlanKey&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const PlanKey& k) {
    return H::combine(std::move(h), k.call, k.device, k.dtype, k.args);
  }
};
struct PlanChoice {
  int algo;  // the direction's cudnnConvolution*Algo_t
  size_t nbytes;
};

// The choices made so far, for every thread (rank threads share shapes).
class PlanCache {
 public:
  bool Find(const PlanKey& key, PlanChoice* choice) {
    std::lock_guard lock(mutex_);
    const auto it = choices_.find(key);
    if (it == choices_.end()) return false;
    *choice = it->second;
    return true;
  }
  void Keep(const PlanKey& key, PlanChoice choice) {
    std::lock_guard lock(mutex_);
    choices_.emplace(key, choice);
  }

 private:
  std::mutex mutex_;
  absl::flat_hash_map<PlanKey, PlanChoice> choices_;
};
PlanCache& Plans() {
  static auto* cache = new PlanCache;  // never destroyed: rank threads may outlive statics
  return *cache;
}

// The algorithm for one call — cuDNN's ranked candidates from `rank`, then Choose — and its
// workspace, sized by `size`, both asked once per shape. Both take the handle and the call's
// descriptors `descs` first.
template <typename Algo>
struct Plan {
  Algo algo;
  Scratch workspace;  // freed in stream order after the call
};
template <typename Perf, typename Algo, typename Rank, typename Size, typename... Descs>
Plan<Algo> PlanCall(const blas::ConvArgs& a, const ConvCall& c, std::string_view name,
                    Algo fallback, Rank rank, Size size, Descs... descs) {
  const PlanKey key{name,
                    c.device.index,
                    c.dtype,
                    {a.n, a.c, a.h, a.w, a.o, a.kh, a.kw, a.stride, a.padding, a.ho, a.wo}};
  PlanChoice choice;
  if (!Plans().Find(key, &choice)) {
    Perf candidates[kMaxCandidates];
    int count = 0;
    CheckCudnn(rank(c.handle, descs..., kMaxCandidates, &count, candidates),
               StrCat(name, ": ranking its algorithms"));
    const Algo algo = Choose(candidates, count, fallback);
    choice = {static_cast<int>(algo), 0};
    CheckCudnn(size(c.handle, descs..., algo, &choice.nbytes),
               StrCat(name, ": its workspace size"));
    Plans().Keep(key, choice);
  }
  return {static_cast<Algo>(choice.algo),
          Scratch(choice.nbytes, c.device, CurrentStream(c.device))};
}

}  // namespace

void Conv2dForward(const blas::ConvArgs& a, const Tensor& x, const Tensor& weight,
                   const Tensor& bias, const Tensor& out) {
  const ConvCall c(a, x);
  const ConvDescriptors& d = c.d;
  const auto [algo, ws] = PlanCall<cudnnConvolutionFwdAlgoPerf_t>(
      a, c, "cudnnConvolutionForward", CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
      cudnnGetConvolutionForwardAlgorithm_v7, cudnnGetConvolutionForwardWorkspaceSize, d.x.get(),
      d.w.get(), d.conv.get(), d.y.get());
  CheckCudnn(cudnnConvolutionForward(c.handle, kOne.For(c.dtype), d.x.get(), x.raw_data(),
                                     d.w.get(), weight.raw_data(), d.conv.get(), algo, ws.get(),
                                     ws.size(), kZero.For(c.dtype), d.y.get(), out.raw_data()),
             "cudnnConvolutionForward");
  if (!bias.defined()) return;
  // out[n, o, :, :] += bias[o], the bias seen as a [1, O, 1, 1] tensor that cuDNN broadcasts.
  const TensorDescriptor b = MakeTensorDescriptor(c.dtype, 1, a.o, 1, 1);
  CheckCudnn(cudnnAddTensor(c.handle, kOne.For(c.dtype), b.get(), bias.raw_data(),
                            kOne.For(c.dtype), d.y.get(), out.raw_data()),
             "cudnnAddTensor");
}

void Conv2dBackwardData(const blas::ConvArgs& a, const Tensor& dy, const Tensor& weight,
                        const Tensor& dx) {
  const ConvCall c(a, dy);
  const ConvDescriptors& d = c.d;
  const auto [algo, ws] = PlanCall<cudnnConvolutionBwdDataAlgoPerf_t>(
      a, c, "cudnnConvolutionBackwardData", CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
      cudnnGetConvolutionBackwardDataAlgorithm_v7, cudnnGetConvolutionBackwardDataWorkspaceSize,
      d.w.get(), d.y.get(), d.conv.get(), d.x.get());
  CheckCudnn(cudnnConvolutionBackwardData(c.handle, kOne.For(c.dtype), d.w.get(), weight.raw_data(),
                                          d.y.get(), dy.raw_data(), d.conv.get(), algo, ws.get(),
                                          ws.size(), kZero.For(c.dtype), d.x.get(), dx.raw_data()),
             "cudnnConvolutionBackwardData");
}

void Conv2dBackwardWeight(const blas::ConvArgs& a, const Tensor& x, const Tensor& dy,
                          const Tensor& dw) {
  const ConvCall c(a, dy);
  const ConvDescriptors& d = c.d;
  const auto [algo, ws] = PlanCall<cudnnConvolutionBwdFilterAlgoPerf_t>(
      a, c, "cudnnConvolutionBackwardFilter", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
      cudnnGetConvolutionBackwardFilterAlgorithm_v7, cudnnGetConvolutionBackwardFilterWorkspaceSize,
      d.x.get(), d.y.get(), d.conv.get(), d.w.get());
  CheckCudnn(
      cudnnConvolutionBackwardFilter(c.handle, kOne.For(c.dtype), d.x.get(), x.raw_data(),
                                     d.y.get(), dy.raw_data(), d.conv.get(), algo, ws.get(),
                                     ws.size(), kZero.For(c.dtype), d.w.get(), dw.raw_data()),
      "cudnnConvolutionBackwardFilter");
}

// db[o] = the sum of dy[:, o, :, :].
void Conv2dBackwardBias(const blas::ConvArgs& a, const Tensor& dy, const Tensor& db) {
  const ConvCall c(a, dy);
  const TensorDescriptor b = MakeTensorDescriptor(c.dtype, 1, a.o, 1, 1);
  CheckCudnn(cudnnConvolutionBackwardBias(c.handle, kOne.For(c.dtype), c.d.y.get(), dy.raw_data(),
                                          kZero.For(c.dtype), b.get(), db.raw_data()),
             "cudnnConvolutionBackwardBias");
}

}  // namespace ddpkit::cuda
