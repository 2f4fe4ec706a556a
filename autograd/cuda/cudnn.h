// cuDNN for the vision ops on a GPU (conv.cc): the status check, a handle per thread and GPU on
// the calling thread's current stream, and NCHW descriptors that destroy themselves. CUDA
// builds only (the configure requires cuDNN with CUDA on).
#pragma once

#include <cudnn.h>

#include <string_view>

#include "autograd/device.h"
#include "autograd/dtype.h"

namespace ddpkit::cuda {

// Throws "[cuda] <what>: <cuDNN's error text>" unless `status` is CUDNN_STATUS_SUCCESS.
void CheckCudnn(cudnnStatus_t status, std::string_view what);

// This thread's handle for `device`, bound to its current stream (a handle is not meant to be
// shared between threads, as cuBLAS's).
cudnnHandle_t CudnnHandle(Device device);

// float32 or float64 as cuDNN names it.
cudnnDataType_t CudnnType(DType dtype);

// A cuDNN descriptor that destroys itself (movable, not copyable).
template <typename Desc, auto Destroy>
class Descriptor {
 public:
  explicit Descriptor(Desc desc) : desc_(desc) {}
  Descriptor(Descriptor&& other) noexcept : desc_(other.desc_) { other.desc_ = nullptr; }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Descriptor& operator=(Descriptor&&) = delete;
  ~Descriptor() {
    if (desc_ != nullptr) Destroy(desc_);
  }
  Desc get() const { return desc_; }

 private:
  Desc desc_;
};
using TensorDescriptor = Descriptor<cudnnTensorDescriptor_t, &cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Descriptor<cudnnFilterDescriptor_t, &cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    Descriptor<cudnnConvolutionDescriptor_t, &cudnnDestroyConvolutionDescriptor>;

// A dense NCHW tensor [n, c, h, w].
TensorDescriptor MakeTensorDescriptor(DType dtype, int64_t n, int64_t c, int64_t h, int64_t w);
// A filter [o, c, kh, kw] in NCHW order (PyTorch's weight layout).
FilterDescriptor MakeFilterDescriptor(DType dtype, int64_t o, int64_t c, int64_t kh, int64_t kw);
// A 2-D cross-correlation (PyTorch's conv2d), one stride and padding for both axes, dilation 1,
// computed in the data's own precision with FMA math only: no TF32 for float32, as Gemm.
ConvolutionDescriptor MakeConvolutionDescriptor(DType dtype, int64_t stride, int64_t padding);

}  // namespace ddpkit::cuda
