// The CUDA build of cudnn.h.
#include "autograd/cuda/cudnn.h"

#include "autograd/base/error.h"
#include "autograd/cuda/runtime.h"
#include "autograd/cuda/thread_handles.h"

namespace ddpkit::cuda {
namespace {

// cuDNN takes int dimensions; a larger one is refused rather than truncated.
int Dim(int64_t d) {
  DDPKIT_CHECK(d > 0 && d <= (int64_t{1} << 31) - 1, "[cuda] cuDNN dimension out of range: ", d);
  return static_cast<int>(d);
}

}  // namespace

void CheckCudnn(cudnnStatus_t status, std::string_view what) {
  DDPKIT_CHECK(status == CUDNN_STATUS_SUCCESS, "[cuda] ", what, ": ", cudnnGetErrorString(status));
}

cudnnHandle_t CudnnHandle(Device device) {
  thread_local ThreadHandles<cudnnHandle_t, &cudnnCreate, &cudnnDestroy, &cudnnSetStream> handles;
  return handles.For(device, CheckCudnn);
}

cudnnDataType_t CudnnType(DType dtype) {
  DDPKIT_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64,
               "[cuda] cuDNN ops take float32 or float64, got ", DTypeName(dtype));
  return dtype == DType::kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

TensorDescriptor MakeTensorDescriptor(DType dtype, int64_t n, int64_t c, int64_t h, int64_t w) {
  cudnnTensorDescriptor_t desc;
  CheckCudnn(cudnnCreateTensorDescriptor(&desc), "cudnnCreateTensorDescriptor");
  TensorDescriptor owned(desc);
  CheckCudnn(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, CudnnType(dtype), Dim(n), Dim(c),
                                        Dim(h), Dim(w)),
             "cudnnSetTensor4dDescriptor");
  return owned;
}

FilterDescriptor MakeFilterDescriptor(DType dtype, int64_t o, int64_t c, int64_t kh, int64_t kw) {
  cudnnFilterDescriptor_t desc;
  CheckCudnn(cudnnCreateFilterDescriptor(&desc), "cudnnCreateFilterDescriptor");
  FilterDescriptor owned(desc);
  CheckCudnn(cudnnSetFilter4dDescriptor(desc, CudnnType(dtype), CUDNN_TENSOR_NCHW, Dim(o), Dim(c),
                                        Dim(kh), Dim(kw)),
             "cudnnSetFilter4dDescriptor");
  return owned;
}

ConvolutionDescriptor MakeConvolutionDescriptor(DType dtype, int64_t stride, int64_t padding) {
  cudnnConvolutionDescriptor_t desc;
  CheckCudnn(cudnnCreateConvolutionDescriptor(&desc), "cudnnCreateConvolutionDescriptor");
  ConvolutionDescriptor owned(desc);
  const int pad = padding == 0 ? 0 : Dim(padding);
  CheckCudnn(cudnnSetConvolution2dDescriptor(desc, pad, pad, Dim(stride), Dim(stride), 1, 1,
                                             CUDNN_CROSS_CORRELATION, CudnnType(dtype)),
             "cudnnSetConvolution2dDescriptor");
  CheckCudnn(cudnnSetConvolutionMathType(desc, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
  return owned;
}

}  // namespace ddpkit::cuda
