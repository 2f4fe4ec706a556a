// Softmax over the last dimension, as torch.softmax(x, dim=-1).
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"
#include "autograd/ops/softmax_rows.h"

namespace ddpkit {

Tensor Softmax(const Tensor& x) {
  op_util::CheckFloating("softmax", x);
  DDPKIT_CHECK(x.dim() >= 1, "[softmax] input must have at least one dimension");
  DDPKIT_CHECK(!x.is_cuda(), "[softmax] runs on the host only (no CUDA kernel yet)");
  const int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  Tensor y = Tensor::Uninitialized(x.shape(), x.dtype(), x.device());
  DispatchFloating(x.dtype(), "softmax", [&]<typename T>() {
    for (int64_t r = 0; r < rows; ++r) {
      op_util::SoftmaxRow(x.data<T>() + r * n, y.data<T>() + r * n, n);
    }
  });
  // dx = y * (dy - sum(dy * y)) per row: the backward needs only the output.
  RecordOp(y, "SoftmaxBackward", {&x}, [y = y.Detach(), n, rows](const Tensor& g) -> TensorList {
    Tensor dx = Tensor::Uninitialized(g.shape(), g.dtype(), g.device());
    DispatchFloating(g.dtype(), "softmax_backward", [&]<typename T>() {
      for (int64_t r = 0; r < rows; ++r) {
        op_util::SoftmaxBackwardRow(y.data<T>() + r * n, g.data<T>() + r * n, dx.data<T>() + r * n,
                                    n);
      }
    });
    return {dx};
  });
  return y;
}

}  // namespace ddpkit
