// Softmax over the last dimension and its backward, on the host or a GPU, shared by Softmax
// (softmax.cc) and the attention op (attention.cc), which applies them to every head's scores.
#pragma once

#include "autograd/tensor.h"

namespace ddpkit::op_util {

// y <- the softmax of each row of x (the last dimension). With `causal`, row r of each
// [n, n] matrix (r % n) is first scaled by `scale` and masked to -inf above the diagonal, as
// nanoGPT's scores; the masked entries come out 0. y may be x.
void SoftmaxLastDim(const Tensor& x, const Tensor& y, bool causal = false, double scale = 1.0);
// dx <- scale * y * (dy - rowsum(dy * y)) (0 where y is). dx may be dy.
void SoftmaxLastDimBackward(const Tensor& y, const Tensor& dy, const Tensor& dx,
                            double scale = 1.0);

}  // namespace ddpkit::op_util
