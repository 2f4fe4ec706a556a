// Gemm through each host library against a float64 product computed element by element, the
// fused bias/ReLU epilogue, the library choice, and LinearRelu against Relu(Linear(...)).
#include "autograd/gemm.h"

#include <cmath>
#include <cstdlib>
#include <tuple>

#include "autograd/ops.h"
#include "autograd/random.h"
#include "gtest/gtest.h"
#include "tests/autograd/test_util.h"

namespace ddpkit {
namespace {

using testing_util::AllClose;

// Sets the float32 library for one test and restores the previous one.
class LibraryScope {
 public:
  explicit LibraryScope(GemmLibrary library) : saved_(CurrentGemmLibrary()) {
    SetGemmLibrary(library);
  }
  ~LibraryScope() { SetGemmLibrary(saved_); }

 private:
  GemmLibrary saved_;
};

Tensor Random(const Shape& shape, Generator& gen, DType dtype = DType::kFloat32) {
  Tensor t = Tensor::Empty(shape, DType::kFloat64);
  gen.FillUniform(t, -1, 1);
  return t.To(dtype);
}

// op(A) op(B) in float64, one element at a time: the reference no library computes.
Tensor NaiveProduct(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const Tensor& a,
                    const Tensor& b) {
  const std::vector<double> av = a.ToDoubles(), bv = b.ToDoubles();
  Tensor c = Tensor::Zeros({m, n}, DType::kFloat64);
  double* out = c.data<double>();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        sum += av[ta ? p * m + i : i * k + p] * bv[tb ? j * k + p : p * n + j];
      }
      out[i * n + j] = sum;
    }
  }
  return c;
}

class GemmTest : public testing::TestWithParam<std::tuple<GemmLibrary, bool, bool>> {};

// Shapes on both sides of oneDNN's threshold (a side under 16 goes to OpenBLAS), odd sizes.
TEST_P(GemmTest, MatchesTheNaiveProductForEveryTranspose) {
  const auto [library, ta, tb] = GetParam();
  LibraryScope scope(library);
  Generator gen(3);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{37, 45, 29},
                         {64, 128, 96},
                         {5, 40, 33},
                         {40, 3, 20},
                         {24, 24, 2}}) {
    Tensor a = Random(ta ? Shape{k, m} : Shape{m, k}, gen);
    Tensor b = Random(tb ? Shape{n, k} : Shape{k, n}, gen);
    const Tensor want = NaiveProduct(ta, tb, m, n, k, a, b);
    // beta 0 ignores what C held, NaN included.
    Tensor c = Tensor::Full({m, n}, std::nan(""), DType::kFloat32);
    Gemm(ta, tb, m, n, k, 1.0, a, b, 0.0, c);
    EXPECT_TRUE(AllClose(c.To(DType::kFloat64), want, 1e-5, 1e-5)) << m << "x" << n << "x" << k;
    // beta 1 accumulates: C = AB + AB.
    Gemm(ta, tb, m, n, k, 1.0, a, b, 1.0, c);
    EXPECT_TRUE(AllClose(c.To(DType::kFloat64), MulScalar(want, 2.0), 1e-5, 1e-5));
    // alpha and beta other than 0 and 1: C = 0.5 AB - 2 C.
    Gemm(ta, tb, m, n, k, 0.5, a, b, -2.0, c);
    EXPECT_TRUE(AllClose(c.To(DType::kFloat64), MulScalar(want, -3.5), 1e-5, 1e-5));
  }
}

TEST_P(GemmTest, BiasAndReluEpilogue) {
  const auto [library, ta, tb] = GetParam();
  LibraryScope scope(library);
  Generator gen(4);
  const int64_t m = 33, n = 48, k = 40;
  Tensor a = Random(ta ? Shape{k, m} : Shape{m, k}, gen);
  Tensor b = Random(tb ? Shape{n, k} : Shape{k, n}, gen);
  Tensor bias = Random({n}, gen);
  const std::vector<double> product = NaiveProduct(ta, tb, m, n, k, a, b).ToDoubles();
  const std::vector<double> bias_values = bias.ToDoubles();
  for (bool relu : {false, true}) {
    for (bool with_bias : {false, true}) {
      Tensor c = Tensor::Full({m, n}, std::nan(""), DType::kFloat32);
      GemmBiasAct(ta, tb, m, n, k, a, b, {.bias = with_bias ? bias : Tensor(), .relu = relu}, c);
      const std::vector<double> got = c.ToDoubles();
      for (int64_t i = 0; i < m * n; ++i) {
        double want = product[i] + (with_bias ? bias_values[i % n] : 0.0);
        if (relu) want = std::max(want, 0.0);
        ASSERT_NEAR(got[i], want, 1e-5) << "element " << i << " relu " << relu;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Libraries, GemmTest,
                         testing::Combine(testing::Values(GemmLibrary::kOneDnn,
                                                          GemmLibrary::kOpenBlas),
                                          testing::Bool(), testing::Bool()),
                         [](const auto& info) {
                           return std::string(GemmLibraryName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_At" : "_A") +
                                  (std::get<2>(info.param) ? "_Bt" : "_B");
                         });

TEST(GemmTest, Float64GoesThroughOpenBlasUnderEitherChoice) {
  LibraryScope scope(GemmLibrary::kOneDnn);
  Generator gen(5);
  Tensor a = Random({20, 30}, gen, DType::kFloat64), b = Random({30, 25}, gen, DType::kFloat64);
  Tensor c = Tensor::Empty({20, 25}, DType::kFloat64);
  Gemm(false, false, 20, 25, 30, 1.0, a, b, 0.0, c);
  EXPECT_TRUE(AllClose(c, NaiveProduct(false, false, 20, 25, 30, a, b), 1e-13, 1e-13));
}

TEST(GemmTest, TheLibrariesAgree) {
  Generator gen(6);
  Tensor a = Random({64, 784}, gen), b = Random({256, 784}, gen);
  Tensor c1 = Tensor::Empty({64, 256}), c2 = Tensor::Empty({64, 256});
  {
    LibraryScope scope(GemmLibrary::kOneDnn);
    Gemm(false, true, 64, 256, 784, 1.0, a, b, 0.0, c1);
  }
  {
    LibraryScope scope(GemmLibrary::kOpenBlas);
    Gemm(false, true, 64, 256, 784, 1.0, a, b, 0.0, c2);
  }
  // 784-term float32 sums of terms in [-1, 1], rounded in different orders.
  EXPECT_TRUE(AllClose(c1, c2, 1e-5, 1e-4));
}

TEST(GemmTest, LibraryNamesAndTheEnvironment) {
  EXPECT_EQ(*ParseGemmLibrary("onednn"), GemmLibrary::kOneDnn);
  EXPECT_EQ(*ParseGemmLibrary("openblas"), GemmLibrary::kOpenBlas);
  absl::StatusOr<GemmLibrary> bad = ParseGemmLibrary("mkl");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "GEMM library 'mkl' is not known; choose onednn or openblas");
  const char* saved = std::getenv("DDPKIT_GEMM");
  setenv("DDPKIT_GEMM", "blis", 1);
  absl::StatusOr<GemmLibrary> from_env = GemmLibraryFromEnv();
  ASSERT_FALSE(from_env.ok());
  EXPECT_NE(from_env.status().message().find("DDPKIT_GEMM: GEMM library 'blis'"),
            std::string_view::npos)
      << from_env.status();
  setenv("DDPKIT_GEMM", "openblas", 1);
  EXPECT_EQ(*GemmLibraryFromEnv(), GemmLibrary::kOpenBlas);
  unsetenv("DDPKIT_GEMM");
  EXPECT_EQ(*GemmLibraryFromEnv(), GemmLibrary::kOneDnn);
  if (saved != nullptr) setenv("DDPKIT_GEMM", saved, 1);
}

// The fused op gives Relu(Linear(...))'s output and gradients, on both libraries.
TEST(LinearReluTest, EqualsReluOfLinear) {
  for (GemmLibrary library : {GemmLibrary::kOneDnn, GemmLibrary::kOpenBlas}) {
    LibraryScope scope(library);
    Generator gen(8);
    TensorList fused = {Random({24, 40}, gen), Random({32, 40}, gen), Random({32}, gen)};
    TensorList plain;
    for (Tensor& t : fused) {
      plain.push_back(t.Clone());
      plain.back().set_requires_grad(true);
      t.set_requires_grad(true);
    }
    Tensor weights = Random({24, 32}, gen);
    Tensor y1 = LinearRelu(fused[0], fused[1], fused[2]);
    Tensor y2 = Relu(Linear(plain[0], plain[1], plain[2]));
    EXPECT_TRUE(AllClose(y1, y2, 1e-6, 1e-6)) << GemmLibraryName(library);
    Sum(Mul(y1, weights)).Backward();
    Sum(Mul(y2, weights)).Backward();
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(AllClose(fused[i].grad(), plain[i].grad(), 1e-5, 1e-6))
          << GemmLibraryName(library) << " input " << i;
    }
  }
}

}  // namespace
}  // namespace ddpkit
