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

// A dense NCHW tensor [n, c, h, w].
class TensorDescriptor {
 public:
  TensorDescriptor(DType dtype, int64_t n, int64_t c, int64_t h, int64_t w);
  ~TensorDescriptor();
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

// A filter [o, c, kh, kw] in NCHW order (PyTorch's weight layout).
class FilterDescriptor {
 public:
  FilterDescriptor(DType dtype, int64_t o, int64_t c, int64_t kh, int64_t kw);
  ~FilterDescriptor();
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

// A 2-D cross-correlation (PyTorch's conv2d), one stride and padding for both axes, dilation 1,
// computed in the data's own precision with FMA math only: no TF32 for float32, as Gemm.
class ConvolutionDescriptor {
 public:
  ConvolutionDescriptor(DType dtype, int64_t stride, int64_t padding);
  ~ConvolutionDescriptor();
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
  cudnnConvolutionDescriptor_t get() const { return desc_; }

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

}  // namespace ddpkit::cuda
