// The GPU side of optim.cc's Adam loop: one thread per element, running AdamUpdate, the
// update the host loop runs.
#include "autograd/adam_update.h"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/ops.h"

namespace ddpkit::cuda {
namespace {

template <typename T>
void AdamStepOf(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                const Tensor& exp_avg_sq, const AdamUpdate& update) {
  T* w = param.device_data<T>();
  const T* g = grad.device_data<T>();
  T* m = exp_avg.device_data<T>();
  T* v = exp_avg_sq.device_data<T>();
  const AdamUpdate u = update;
  ForEach(param.device(), param.numel(), "AdamStep",
          [=] __device__(int64_t i) { u(w[i], g[i], m[i], v[i]); });
}

}  // namespace

void AdamStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
              const Tensor& exp_avg_sq, const AdamUpdate& update) {
  for (const Tensor* t : {&grad, &exp_avg, &exp_avg_sq}) {
    DDPKIT_CHECK(
        t->dtype() == param.dtype() && t->numel() == param.numel() && t->device() == param.device(),
        "[Adam] state ", DTypeName(t->dtype()), ShapeString(t->shape()), " on ",
        t->device().ToString(), " does not match its parameter ", DTypeName(param.dtype()),
        ShapeString(param.shape()), " on ", param.device().ToString());
  }
  DDPKIT_CHECK(IsComputeType(param.dtype()), "[Adam] expects float32 or float64, got ",
               DTypeName(param.dtype()));
  param.dtype() == DType::kFloat64 ? AdamStepOf<double>(param, grad, exp_avg, exp_avg_sq, update)
                                   : AdamStepOf<float>(param, grad, exp_avg, exp_avg_sq, update);
}

}  // namespace ddpkit::cuda
