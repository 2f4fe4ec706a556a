// The host GEMM libraries behind autograd/gemm.h, one file each. Internal to autograd: call Gemm.
// Arguments are checked by the caller; m, n, k > 0 and every pointer is to host memory.
#pragma once

#include <cstdint>

#include "autograd/dtype.h"

namespace ddpkit::blas {

// Row-major operands as Gemm takes them, with leading dimensions derived from the shapes.
struct GemmArgs {
  bool transpose_a = false, transpose_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  const void* bias = nullptr;  // [n] or null (GemmBiasAct only)
  bool relu = false;           // GemmBiasAct only
};

// C = alpha op(A) op(B) + beta C through cblas_sgemm / cblas_dgemm.
void OpenBlasGemm(DType dtype, const GemmArgs& args, double alpha, double beta);

// float32 through oneDNN's matmul primitive: C = act(op(A) op(B) + bias + beta C) for beta 0 or 1.
// Primitives are made once per shape and thread count and kept per thread, so a steady-state
// call allocates nothing. False when oneDNN has no kernel for the call; the caller falls back.
bool OneDnnGemm(const GemmArgs& args, bool accumulate);

// A float32 NCHW conv2d (autograd/ops/conv.cc): x [n, c, h, w], weight [o, c, kh, kw], bias [o],
// y [n, o, ho, wo], one stride and padding for both axes.
struct ConvArgs {
  int64_t n, c, h, w, o, kh, kw, stride, padding, ho, wo;
};
// Through oneDNN's convolution primitives (in blocked layouts, the NCHW operands reordered
// in and out), kept per shape and thread. Each returns false when oneDNN has no kernel for the
// shape; the caller falls back to im2col + GEMM. `bias` and `dbias` may be null.
bool OneDnnConvForward(const ConvArgs& args, const float* x, const float* weight, const float* bias,
                       float* y);
bool OneDnnConvBackwardData(const ConvArgs& args, const float* dy, const float* weight, float* dx);
bool OneDnnConvBackwardWeights(const ConvArgs& args, const float* x, const float* dy,
                               float* dweight, float* dbias);

// c[i, j] = act(c[i, j] + bias[j]) over an m x n row-major float32/float64 matrix: the epilogue
// of the paths without a fused one.
void BiasActInPlace(DType dtype, int64_t m, int64_t n, void* c, const void* bias, bool relu);

}  // namespace ddpkit::blas
