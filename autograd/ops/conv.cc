// conv2d (NCHW). float32 runs oneDNN's convolution primitives (autograd/blas/onednn_conv.cc),
// faster than im2col + GEMM here (docs/performance.md); float64, which they lack, and any shape
// they refuse run im2col + GEMM image by image (OpenBLAS's or oneDNN's GEMM through
// autograd/gemm.h) — the path the finite-difference test checks. A 1×1, stride-1, unpadded
// convolution needs no im2col: the image itself is the column matrix. On a GPU all of it runs
// through cuDNN (autograd/cuda/conv.cc).
#include "autograd/blas/backends.h"
#include "autograd/cuda/ops.h"
#include "autograd/function.h"
#include "autograd/gemm.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace ddpkit {
namespace {

struct ConvGeometry {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // weight [o, c, kh, kw]
  int64_t stride, padding;
  int64_t ho, wo;                                // output
  int64_t patch() const { return c * kh * kw; }  // rows of the column matrix
  int64_t positions() const { return ho * wo; }  // its columns
  bool pointwise() const { return kh == 1 && kw == 1 && stride == 1 && padding == 0; }
};

ConvGeometry CheckConv(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Conv2dOptions& options) {
  op_util::CheckFloating("conv2d", x);
  op_util::CheckFloating("conv2d", weight);
  DDPKIT_CHECK(x.dim() == 4 && weight.dim() == 4, "[conv2d] input must be [N, C, H, W] and weight ",
               "[O, C, kH, kW], got ", ShapeString(x.shape()), " and ",
               ShapeString(weight.shape()));
  DDPKIT_CHECK(x.dtype() == weight.dtype() && (!bias.defined() || bias.dtype() == x.dtype()),
               "[conv2d] input, weight and bias must share one dtype");
  op_util::CheckSameDevice("conv2d", x, weight);
  if (bias.defined()) op_util::CheckSameDevice("conv2d", x, bias);
  DDPKIT_CHECK(x.size(1) == weight.size(1), "[conv2d] input has ", x.size(1),
               " channels but weight expects ", weight.size(1));
  DDPKIT_CHECK(!bias.defined() || bias.shape() == Shape{weight.size(0)}, "[conv2d] bias must be [",
               weight.size(0), "], got ", ShapeString(bias.shape()));
  DDPKIT_CHECK(options.stride >= 1 && options.padding >= 0,
               "[conv2d] stride must be positive and padding non-negative, got stride ",
               options.stride, " padding ", options.padding);
  ConvGeometry g{.n = x.size(0),
                 .c = x.size(1),
                 .h = x.size(2),
                 .w = x.size(3),
                 .o = weight.size(0),
                 .kh = weight.size(2),
                 .kw = weight.size(3),
                 .stride = options.stride,
                 .padding = options.padding,
                 .ho = (x.size(2) + 2 * options.padding - weight.size(2)) / options.stride + 1,
                 .wo = (x.size(3) + 2 * options.padding - weight.size(3)) / options.stride + 1};
  DDPKIT_CHECK(g.h + 2 * g.padding >= g.kh && g.w + 2 * g.padding >= g.kw,
               "[conv2d] the padded input ", ShapeString(x.shape()), " (padding ", g.padding,
               ") is smaller than the kernel ", ShapeString(weight.shape()));
  return g;
}

// For each (channel, kernel row i, kernel column j) — one row of the column matrix — the input
// element each output position reads, or 0 where it falls in the padding. `Scatter` false
// copies x into col; true adds col back into x (col2im, the backward of the copy).
template <bool Scatter, typename T>
void Im2Col(const ConvGeometry& g, T* x, T* col) {
  const int64_t positions = g.positions();
  for (int64_t row = 0; row < g.patch(); ++row) {
    const int64_t j = row % g.kw, i = (row / g.kw) % g.kh, ch = row / (g.kw * g.kh);
    T* plane = x + ch * g.h * g.w;
    T* out = col + row * positions;
    for (int64_t oy = 0; oy < g.ho; ++oy) {
      const int64_t iy = oy * g.stride - g.padding + i;
      T* line = out + oy * g.wo;
      const bool row_inside = iy >= 0 && iy < g.h;
      for (int64_t ox = 0; ox < g.wo; ++ox) {
        const int64_t ix = ox * g.stride - g.padding + j;
        const bool inside = row_inside && ix >= 0 && ix < g.w;
        if constexpr (Scatter) {
          if (inside) plane[iy * g.w + ix] += line[ox];
        } else {
          line[ox] = inside ? plane[iy * g.w + ix] : T(0);
        }
      }
    }
  }
}

// Image n's column matrix [patch, positions]: the image itself for a pointwise convolution,
// else `scratch` filled by im2col.
Tensor Columns(const ConvGeometry& g, const Tensor& x, int64_t n, const Tensor& scratch) {
  Tensor image = x.Rows(n, n + 1);
  if (g.pointwise()) return image;
  DispatchFloating(x.dtype(), "conv2d",
                   [&]<typename T>() { Im2Col<false>(g, image.data<T>(), scratch.data<T>()); });
  return scratch;
}

// out[n, o, :, :] += bias[o].
void AddChannelBias(const Tensor& out, const Tensor& bias) {
  DispatchFloating(out.dtype(), "conv2d", [&]<typename T>() {
    const int64_t channels = out.size(1), plane = out.numel() / (out.size(0) * channels);
    T* y = out.data<T>();
    const T* b = bias.data<T>();
    for (int64_t nc = 0; nc < out.size(0) * channels; ++nc) {
      for (int64_t p = 0; p < plane; ++p) y[nc * plane + p] += b[nc % channels];
    }
  });
}

// db[o] = sum of dy[n, o, :, :].
Tensor ChannelSums(const Tensor& dy) {
  Tensor db = Tensor::Zeros({dy.size(1)}, dy.dtype());
  DispatchFloating(dy.dtype(), "conv2d_backward", [&]<typename T>() {
    const int64_t channels = dy.size(1), plane = dy.numel() / (dy.size(0) * channels);
    const T* g = dy.data<T>();
    T* b = db.data<T>();
    for (int64_t nc = 0; nc < dy.size(0) * channels; ++nc) {
      double sum = 0;
      for (int64_t p = 0; p < plane; ++p) sum += g[nc * plane + p];
      b[nc % channels] += static_cast<T>(sum);
    }
  });
  return db;
}

blas::ConvArgs Args(const ConvGeometry& g) {
  return {g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.stride, g.padding, g.ho, g.wo};
}

bool OneDnnForward(const ConvGeometry& g, const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const Tensor& out) {
  return x.dtype() == DType::kFloat32 && g.n > 0 &&
         blas::OneDnnConvForward(Args(g), x.data<float>(), weight.data<float>(),
                                 bias.defined() ? bias.data<float>() : nullptr, out.data<float>());
}

void Im2ColForward(const ConvGeometry& g, const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const Tensor& out) {
  Tensor scratch = g.pointwise()
                       ? Tensor()
                       : Tensor::Uninitialized({g.patch(), g.positions()}, x.dtype(), x.device());
  for (int64_t n = 0; n < g.n; ++n) {
    Gemm(false, false, g.o, g.positions(), g.patch(), 1.0, weight, Columns(g, x, n, scratch), 0.0,
         out.Rows(n, n + 1));
  }
  if (bias.defined()) AddChannelBias(out, bias);
}

struct ConvSaved {
  ConvGeometry g;
  Tensor x, w;
  bool x_grad, w_grad, b_grad;
};

// dW = sum_n dY[n] [o, positions] x col[n]^T;  dcol[n] = W^T dY[n], scattered back into dx[n].
TensorList Im2ColBackward(const ConvSaved& s, const Tensor& dy) {
  const ConvGeometry& g = s.g;
  const DType dtype = dy.dtype();
  Tensor dx = s.x_grad ? Tensor::Zeros(s.x.shape(), dtype) : Tensor();
  Tensor dw = s.w_grad ? Tensor::Zeros(s.w.shape(), dtype) : Tensor();
  Tensor scratch = g.pointwise()
                       ? Tensor()
                       : Tensor::Uninitialized({g.patch(), g.positions()}, dtype, Device::Cpu());
  for (int64_t n = 0; n < g.n; ++n) {
    const Tensor dy_n = dy.Rows(n, n + 1);
    if (s.w_grad) {
      Gemm(false, true, g.o, g.patch(), g.positions(), 1.0, dy_n, Columns(g, s.x, n, scratch), 1.0,
           dw);
    }
    if (!s.x_grad) continue;
    const Tensor dx_n = dx.Rows(n, n + 1);
    Gemm(true, false, g.patch(), g.positions(), g.o, 1.0, s.w, dy_n, 0.0,
         g.pointwise() ? dx_n : scratch);
    if (g.pointwise()) continue;
    DispatchFloating(dtype, "conv2d_backward",
                     [&]<typename T>() { Im2Col<true>(g, dx_n.data<T>(), scratch.data<T>()); });
  }
  return {dx, dw, s.b_grad ? ChannelSums(dy) : Tensor()};
}

// The same gradients from oneDNN's backward-data and backward-weights primitives (the bias's
// with the weight's); false where oneDNN has no kernel.
bool OneDnnBackward(const ConvSaved& s, const Tensor& dy, TensorList& grads) {
  if (dy.dtype() != DType::kFloat32 || s.g.n == 0) return false;
  Tensor dx = s.x_grad ? Tensor::Uninitialized(s.x.shape(), dy.dtype(), Device::Cpu()) : Tensor();
  Tensor dw = Tensor::Uninitialized(s.w.shape(), dy.dtype(), Device::Cpu());
  Tensor db = s.b_grad ? Tensor::Uninitialized({s.g.o}, dy.dtype(), Device::Cpu()) : Tensor();
  const blas::ConvArgs args = Args(s.g);
  if (s.x_grad &&
      !blas::OneDnnConvBackwardData(args, dy.data<float>(), s.w.data<float>(), dx.data<float>())) {
    return false;
  }
  if ((s.w_grad || s.b_grad) &&
      !blas::OneDnnConvBackwardWeights(args, s.x.data<float>(), dy.data<float>(), dw.data<float>(),
                                       s.b_grad ? db.data<float>() : nullptr)) {
    return false;
  }
  grads = {dx, s.w_grad ? dw : Tensor(), db};
  return true;
}

// cuDNN's three backward calls; a batch of no images has zero weight and bias gradients.
TensorList GpuBackward(const ConvSaved& s, const Tensor& dy) {
  const blas::ConvArgs args = Args(s.g);
  const Device device = dy.device();
  Tensor dx = s.x_grad ? Tensor::Uninitialized(s.x.shape(), dy.dtype(), device) : Tensor();
  Tensor dw = s.w_grad ? Tensor::Zeros(s.w.shape(), dy.dtype(), device) : Tensor();
  Tensor db = s.b_grad ? Tensor::Zeros({s.g.o}, dy.dtype(), device) : Tensor();
  if constexpr (kWithCuda) {
    if (s.g.n == 0) return {dx, dw, db};
    if (s.x_grad) cuda::Conv2dBackwardData(args, dy, s.w, dx);
    if (s.w_grad) cuda::Conv2dBackwardWeight(args, s.x, dy, dw);
    if (s.b_grad) cuda::Conv2dBackwardBias(args, dy, db);
  }
  return {dx, dw, db};
}

TensorList ConvBackward(const ConvSaved& s, const Tensor& dy) {
  if (dy.is_cuda()) return GpuBackward(s, dy);
  TensorList grads;
  return OneDnnBackward(s, dy, grads) ? grads : Im2ColBackward(s, dy);
}

}  // namespace

// ---------------------------------------------------------------------------- conv2d
Tensor Conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv2dOptions& options) {
  const ConvGeometry g = CheckConv(x, weight, bias, options);
  Tensor out = Tensor::Uninitialized({g.n, g.o, g.ho, g.wo}, x.dtype(), x.device());
  if (x.is_cuda()) {
    if constexpr (kWithCuda) {
      if (g.n > 0) cuda::Conv2dForward(Args(g), x, weight, bias, out);
    }
  } else if (!OneDnnForward(g, x, weight, bias, out)) {
    Im2ColForward(g, x, weight, bias, out);
  }
  // PyTorch's ConvolutionBackward0 has edges (input, weight, bias); no bias is an empty edge.
  RecordOp(out, "ConvolutionBackward", {&x, &weight, &bias},
           [s = ConvSaved{.g = g,
                          .x = x.Detach(),
                          .w = weight.Detach(),
                          .x_grad = x.requires_grad(),
                          .w_grad = weight.requires_grad(),
                          .b_grad = bias.defined() && bias.requires_grad()}](const Tensor& dy) {
             return ConvBackward(s, dy);
           });
  return out;
}

}  // namespace ddpkit
