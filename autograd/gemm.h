// GEMM on the host and the GPU, and the library that runs it on the host.
//
// Every matmul, linear layer and PowerSGD projection ends in Gemm. On a GPU it is cuBLAS. On the
// host it is one of two libraries behind this one interface, chosen by measurement
// (docs/performance.md, `ddpkit bench gemm`):
//  * oneDNN (the default for float32): its matmul primitive picks kernels by the CPU's features
//    (AVX-512 on this project's machines), and applies a bias and ReLU in the same pass;
//  * OpenBLAS: float64 always (oneDNN's CPU matmul has no float64), float32 products with a side
//    under 16 (PowerSGD's rank-r ones), and every float32 product on request.
// DDPKIT_GEMM=openblas|onednn (or SetGemmLibrary, or `--gemm`) picks the float32 library.
// Either library uses ComputeThreads() threads per call (autograd/compute_threads.h).
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "autograd/tensor.h"

namespace ddpkit {

// C[m x n] = alpha * op(A) * op(B) + beta * C, row-major, where op(X) is X or its transpose.
// A is m x k after op, B is k x n after op. With beta 0, whatever C held is ignored.
void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
          const Tensor& a, const Tensor& b, double beta, const Tensor& c);

// What GemmBiasAct does to each element after the product: c = act(c + bias[column]).
struct GemmEpilogue {
  Tensor bias;        // [n], or undefined for none
  bool relu = false;  // max(0, ·) after the bias
};
// C = act(op(A) op(B) + bias): a linear layer and its activation in one call. oneDNN applies the
// epilogue inside the kernel, while C is in cache; the other paths in one pass after the GEMM.
void GemmBiasAct(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                 const Tensor& a, const Tensor& b, const GemmEpilogue& epilogue, const Tensor& c);

enum class GemmLibrary { kOneDnn, kOpenBlas };
std::string_view GemmLibraryName(GemmLibrary library);  // "onednn", "openblas"
// "onednn" or "openblas"; InvalidArgument naming the choices otherwise.
absl::StatusOr<GemmLibrary> ParseGemmLibrary(std::string_view name);

// DDPKIT_GEMM's choice (oneDNN when unset); InvalidArgument naming the variable otherwise.
absl::StatusOr<GemmLibrary> GemmLibraryFromEnv();
// The float32 library: SetGemmLibrary's choice, else GemmLibraryFromEnv() (a bad value throws
// its error). Process-wide.
GemmLibrary CurrentGemmLibrary();
void SetGemmLibrary(GemmLibrary library);

}  // namespace ddpkit
