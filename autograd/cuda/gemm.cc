// Gemm on the GPU through cuBLAS, with autograd/kernels.h's row-major contract.
//
// cuBLAS is column-major. A row-major C (m x n) is, read column-major, C^T (n x m), and
// C^T = op(B)^T op(A)^T: so the call passes B before A and swaps m and n — no transposes are
// materialised. float32 runs in full float32 (no TF32), as PyTorch's default for matmul.
#include <cublas_v2.h>

#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/kernels.h"
#include "autograd/cuda/runtime.h"
#include "autograd/cuda/thread_handles.h"

namespace ddpkit::cuda {
namespace {

void CheckBlas(cublasStatus_t status, std::string_view what) {
  DDPKIT_CHECK(status == CUBLAS_STATUS_SUCCESS, "[cuda] ", what, ": ",
               cublasGetStatusString(status));
}

cublasHandle_t HandleFor(Device device) {
  thread_local ThreadHandles<cublasHandle_t, &cublasCreate, &cublasDestroy, &cublasSetStream>
      handles;
  return handles.For(device, CheckBlas);
}

}  // namespace

void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
          const Tensor& a, const Tensor& b, double beta, const Tensor& c) {
  DDPKIT_CHECK(a.device() == c.device() && b.device() == c.device(), "[Gemm] operands on ",
               a.device().ToString(), ", ", b.device().ToString(), " and ", c.device().ToString());
  if (m == 0 || n == 0) return;
  if (k == 0) {  // the answer is beta * C (and C may be uninitialised when beta is 0)
    beta == 0.0 ? c.Zero() : ScaleInPlace(c, beta);
    return;
  }
  DeviceScope scope(c.device());
  cublasHandle_t handle = HandleFor(c.device());
  const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = static_cast<int>(transpose_a ? m : k);
  const int ldb = static_cast<int>(transpose_b ? k : n);
  if (c.dtype() == DType::kFloat32) {
    const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
    CheckBlas(cublasSgemm(handle, op_b, op_a, n, m, k, &fa, b.device_data<float>(), ldb,
                          a.device_data<float>(), lda, &fb, c.device_data<float>(), n),
              "cublasSgemm");
  } else {
    DDPKIT_CHECK(c.dtype() == DType::kFloat64, "[Gemm] expects float32 or float64, got ",
                 DTypeName(c.dtype()));
    CheckBlas(cublasDgemm(handle, op_b, op_a, n, m, k, &alpha, b.device_data<double>(), ldb,
                          a.device_data<double>(), lda, &beta, c.device_data<double>(), n),
              "cublasDgemm");
  }
}

}  // namespace ddpkit::cuda
