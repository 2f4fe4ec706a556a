#include "autograd/ops/op_util.h"

#include "autograd/ops.h"

namespace ddpkit::op_util {

void CheckSameDevice(std::string_view op, const Tensor& a, const Tensor& b) {
  DDPKIT_CHECK(a.device() == b.device(), "[", op, "] operands are on ", a.device().ToString(),
               " and ", b.device().ToString(), "; move them to one device with To()");
}

void CheckFloating(std::string_view op, const Tensor& x) {
  DDPKIT_CHECK(x.defined(), "[", op, "] got an undefined tensor");
  DDPKIT_CHECK(IsComputeType(x.dtype()), "[", op, "] expects float32 or float64, got ",
               DTypeName(x.dtype()));
}

void CheckBinary(std::string_view op, const Tensor& a, const Tensor& b) {
  CheckFloating(op, a);
  CheckFloating(op, b);
  DDPKIT_CHECK(a.dtype() == b.dtype(), "[", op, "] dtypes differ: ", DTypeName(a.dtype()), " and ",
               DTypeName(b.dtype()));
  CheckSameDevice(op, a, b);
  DDPKIT_CHECK(a.shape() == b.shape() || a.numel() == 1 || b.numel() == 1, "[", op, "] shapes ",
               ShapeString(a.shape()), " and ", ShapeString(b.shape()),
               " differ (only equal shapes or a single-element operand are supported)");
}

void CheckMatrix(std::string_view op, std::string_view what, const Tensor& x) {
  CheckFloating(op, x);
  DDPKIT_CHECK(x.dim() == 2, "[", op, "] ", what, " must be 2-D, got shape ",
               ShapeString(x.shape()));
}

Tensor SumToShapeOf(const Tensor& grad, const Tensor& input) {
  if (grad.shape() == input.shape()) return grad;
  return Sum(grad).View(input.shape());
}

}  // namespace ddpkit::op_util
