#include "autograd/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "autograd/blas/backends.h"
#include "autograd/cuda/kernels.h"
#include "autograd/kernels.h"

namespace ddpkit {
namespace {

// -1 until SetGemmLibrary or the first CurrentGemmLibrary() reads DDPKIT_GEMM.
std::atomic<int> g_library{-1};

void CheckOperands(std::string_view op, int64_t m, int64_t n, int64_t k, const Tensor& a,
                   const Tensor& b, const Tensor& c) {
  DDPKIT_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype(), "[", op,
               "] dtypes differ: ", DTypeName(a.dtype()), ", ", DTypeName(b.dtype()), ", ",
               DTypeName(c.dtype()));
  DDPKIT_CHECK(a.dtype() == DType::kFloat32 || a.dtype() == DType::kFloat64, "[", op,
               "] expects float32 or float64, got ", DTypeName(a.dtype()));
  DDPKIT_CHECK(a.numel() == m * k && b.numel() == k * n && c.numel() == m * n, "[", op,
               "] operand sizes do not match m=", m, " n=", n, " k=", k);
}

blas::GemmArgs Args(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                    const Tensor& a, const Tensor& b, const Tensor& c) {
  return {.transpose_a = transpose_a,
          .transpose_b = transpose_b,
          .m = m,
          .n = n,
          .k = k,
          .a = a.raw_data(),
          .b = b.raw_data(),
          .c = c.raw_data()};
}

// oneDNN for float32 unless a side is thinner than its kernels' blocks (PowerSGD's rank-r
// products): there both libraries only stream the large operand, and OpenBLAS's call allocates
// nothing where oneDNN's execute makes six small objects — and PowerSGD runs in a comm hook.
constexpr int64_t kOneDnnMinSide = 16;

bool UseOneDnn(DType dtype, int64_t m, int64_t n, int64_t k) {
  return dtype == DType::kFloat32 && std::min({m, n, k}) >= kOneDnnMinSide &&
         CurrentGemmLibrary() == GemmLibrary::kOneDnn;
}

}  // namespace

void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
          const Tensor& a, const Tensor& b, double beta, const Tensor& c) {
  CheckOperands("Gemm", m, n, k, a, b, c);
  if constexpr (kWithCuda) {
    if (c.is_cuda()) return cuda::Gemm(transpose_a, transpose_b, m, n, k, alpha, a, b, beta, c);
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {  // libraries differ on k == 0; the answer is beta * C
    beta == 0.0 ? c.Zero() : ScaleInPlace(c, beta);  // C may be uninitialised when beta is 0
    return;
  }
  const blas::GemmArgs args = Args(transpose_a, transpose_b, m, n, k, a, b, c);
  if (UseOneDnn(a.dtype(), m, n, k) && alpha == 1.0 && (beta == 0.0 || beta == 1.0) &&
      blas::OneDnnGemm(args, /*accumulate=*/beta == 1.0)) {
    return;
  }
  blas::OpenBlasGemm(a.dtype(), args, alpha, beta);
}

void GemmBiasAct(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                 const Tensor& a, const Tensor& b, const GemmEpilogue& epilogue, const Tensor& c) {
  CheckOperands("GemmBiasAct", m, n, k, a, b, c);
  const Tensor& bias = epilogue.bias;
  if (bias.defined()) {
    DDPKIT_CHECK(bias.dtype() == c.dtype() && bias.numel() == n && bias.device() == c.device(),
                 "[GemmBiasAct] bias must be ", DTypeName(c.dtype()), "[", n, "] on ",
                 c.device().ToString(), ", got ", DTypeName(bias.dtype()),
                 ShapeString(bias.shape()), " on ", bias.device().ToString());
  }
  DDPKIT_CHECK(!c.is_cuda(), "[GemmBiasAct] takes host tensors; on a GPU, Gemm then the ops");
  if (m == 0 || n == 0 || k == 0) {  // the product (zeros when k is 0), then the epilogue
    Gemm(transpose_a, transpose_b, m, n, k, 1.0, a, b, 0.0, c);
    if (m > 0 && n > 0) {
      blas::BiasActInPlace(c.dtype(), m, n, c.raw_data(),
                           bias.defined() ? bias.raw_data() : nullptr, epilogue.relu);
    }
    return;
  }
  blas::GemmArgs args = Args(transpose_a, transpose_b, m, n, k, a, b, c);
  args.bias = bias.defined() ? bias.raw_data() : nullptr;
  args.relu = epilogue.relu;
  if (UseOneDnn(a.dtype(), m, n, k) && blas::OneDnnGemm(args, /*accumulate=*/false)) return;
  blas::OpenBlasGemm(a.dtype(), args, 1.0, 0.0);
  blas::BiasActInPlace(c.dtype(), m, n, c.raw_data(), args.bias, args.relu);
}

std::string_view GemmLibraryName(GemmLibrary library) {
  return library == GemmLibrary::kOneDnn ? "onednn" : "openblas";
}

absl::StatusOr<GemmLibrary> ParseGemmLibrary(std::string_view name) {
  if (name == "onednn") return GemmLibrary::kOneDnn;
  if (name == "openblas") return GemmLibrary::kOpenBlas;
  return absl::InvalidArgumentError(
      StrCat("GEMM library '", name, "' is not known; choose onednn or openblas"));
}

absl::StatusOr<GemmLibrary> GemmLibraryFromEnv() {
  const char* value = std::getenv("DDPKIT_GEMM");
  if (value == nullptr || *value == '\0') return GemmLibrary::kOneDnn;
  absl::StatusOr<GemmLibrary> library = ParseGemmLibrary(value);
  if (!library.ok()) {
    return absl::InvalidArgumentError(StrCat("DDPKIT_GEMM: ", library.status().message()));
  }
  return library;
}

GemmLibrary CurrentGemmLibrary() {
  int library = g_library.load(std::memory_order_relaxed);
  if (library < 0) {
    absl::StatusOr<GemmLibrary> from_env = GemmLibraryFromEnv();
    if (!from_env.ok()) ThrowStatus(from_env.status());
    library = static_cast<int>(*from_env);
    g_library.store(library, std::memory_order_relaxed);
  }
  return static_cast<GemmLibrary>(library);
}

void SetGemmLibrary(GemmLibrary library) { g_library.store(static_cast<int>(library)); }

}  // namespace ddpkit
