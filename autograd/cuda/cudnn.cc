// The CUDA build of cudnn.h.
#include "autograd/cuda/cudnn.h"

#include <array>

#include "autograd/cuda/runtime.h"
#include "autograd/error.h"

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
  struct Handles {
    std::array<cudnnHandle_t, 16> by_device{};
    ~Handles() {
      for (cudnnHandle_t h : by_device) {
        if (h != nullptr) cudnnDestroy(h);
      }
    }
  };
  thread_local Handles handles;
  cudnnHandle_t& handle = handles.by_device.at(device.index);
  if (handle == nullptr) CheckCudnn(cudnnCreate(&handle), "cudnnCreate");
  CheckCudnn(cudnnSetStream(handle, CurrentStream(device)), "cudnnSetStream");
  return handle;
}

cudnnDataType_t CudnnType(DType dtype) {
  DDPKIT_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64,
               "[cuda] cuDNN ops take float32 or float64, got ", DTypeName(dtype));
  return dtype == DType::kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

TensorDescriptor::TensorDescriptor(DType dtype, int64_t n, int64_t c, int64_t h, int64_t w) {
  CheckCudnn(cudnnCreateTensorDescriptor(&desc_), "cudnnCreateTensorDescriptor");
  CheckCudnn(cudnnSetTensor4dDescriptor(desc_, CUDNN_TENSOR_NCHW, CudnnType(dtype), Dim(n), Dim(c),
                                        Dim(h), Dim(w)),
             "cudnnSetTensor4dDescriptor");
}
TensorDescriptor::~TensorDescriptor() { cudnnDestroyTensorDescriptor(desc_); }

FilterDescriptor::FilterDescriptor(DType dtype, int64_t o, int64_t c, int64_t kh, int64_t kw) {
  CheckCudnn(cudnnCreateFilterDescriptor(&desc_), "cudnnCreateFilterDescriptor");
  CheckCudnn(cudnnSetFilter4dDescriptor(desc_, CudnnType(dtype), CUDNN_TENSOR_NCHW, Dim(o), Dim(c),
                                        Dim(kh), Dim(kw)),
             "cudnnSetFilter4dDescriptor");
}
FilterDescriptor::~FilterDescriptor() { cudnnDestroyFilterDescriptor(desc_); }

ConvolutionDescriptor::ConvolutionDescriptor(DType dtype, int64_t stride, int64_t padding) {
  CheckCudnn(cudnnCreateConvolutionDescriptor(&desc_), "cudnnCreateConvolutionDescriptor");
  const int pad = padding == 0 ? 0 : Dim(padding);
  CheckCudnn(cudnnSetConvolution2dDescriptor(desc_, pad, pad, Dim(stride), Dim(stride), 1, 1,
                                             CUDNN_CROSS_CORRELATION, CudnnType(dtype)),
             "cudnnSetConvolution2dDescriptor");
  CheckCudnn(cudnnSetConvolutionMathType(desc_, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
}
ConvolutionDescriptor::~ConvolutionDescriptor() { cudnnDestroyConvolutionDescriptor(desc_); }

}  // namespace ddpkit::cuda
