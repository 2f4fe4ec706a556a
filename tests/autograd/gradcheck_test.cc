// Every op's gradient against central finite differences, in float64.
//
// For an op f with inputs x_1..x_k, the test builds the scalar L = sum(f(x) * R) with a fixed
// random R (so every output element matters with a different weight), computes dL/dx_i by
// backward, and compares each element with (L(x + h e_j) - L(x - h e_j)) / 2h.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/random.h"
#include "gtest/gtest.h"

namespace ddpkit {
namespace {

using OpFn = std::function<Tensor(const TensorList&)>;

Tensor RandomTensor(const Shape& shape, Generator& gen, double low = -1.0, double high = 1.0) {
  Tensor t = Tensor::Empty(shape, DType::kFloat64);
  gen.FillUniform(t, low, high);
  return t;
}

// L = sum(f(inputs) * weights).
double Objective(const OpFn& f, const TensorList& inputs, const Tensor& weights) {
  NoGradGuard no_grad;
  return Sum(Mul(f(inputs), weights)).item();
}

void ExpectGradientsMatchFiniteDifferences(const OpFn& f, TensorList inputs,
                                           double tolerance = 1e-6) {
  Generator gen(7);
  for (Tensor& x : inputs) x.set_requires_grad(true);
  Tensor out = f(inputs);
  Tensor weights = RandomTensor(out.shape(), gen);
  Sum(Mul(out, weights)).Backward();

  constexpr double h = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    ASSERT_TRUE(x.grad().defined()) << "input " << i << " got no gradient";
    double* values = x.data<double>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double saved = values[j];
      values[j] = saved + h;
      const double plus = Objective(f, inputs, weights);
      values[j] = saved - h;
      const double minus = Objective(f, inputs, weights);
      values[j] = saved;
      const double numeric = (plus - minus) / (2 * h);
      const double analytic = x.grad().at(j);
      EXPECT_NEAR(analytic, numeric, tolerance * std::max(1.0, std::fabs(numeric)))
          << "input " << i << ", element " << j;
    }
  }
}

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;
  OpFn fn;
  double low = -1.0, high = 1.0;  // input range (kept away from kinks and log's pole)
  friend void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }
};

class GradCheckTest : public testing::TestWithParam<OpCase> {};

TEST_P(GradCheckTest, MatchesFiniteDifferences) {
  const OpCase& c = GetParam();
  Generator gen(42);
  TensorList inputs;
  for (const Shape& shape : c.shapes) inputs.push_back(RandomTensor(shape, gen, c.low, c.high));
  ExpectGradientsMatchFiniteDifferences(c.fn, inputs);
}

Tensor Targets(std::initializer_list<int64_t> values) {
  return Tensor::FromVector<int64_t>(values, {static_cast<int64_t>(values.size())});
}

std::vector<OpCase> Cases() {
  return {
      {"add", {{3, 4}, {3, 4}}, [](const TensorList& x) { return Add(x[0], x[1]); }},
      {"add_broadcast_scalar", {{3, 4}, {}}, [](const TensorList& x) { return Add(x[0], x[1]); }},
      {"sub", {{3, 4}, {3, 4}}, [](const TensorList& x) { return Sub(x[0], x[1]); }},
      {"sub_broadcast_scalar", {{1}, {2, 5}}, [](const TensorList& x) { return Sub(x[0], x[1]); }},
      {"mul", {{3, 4}, {3, 4}}, [](const TensorList& x) { return Mul(x[0], x[1]); }},
      {"mul_broadcast_scalar", {{5, 2}, {}}, [](const TensorList& x) { return Mul(x[0], x[1]); }},
      {"mul_scalar", {{2, 3}}, [](const TensorList& x) { return MulScalar(x[0], -2.5); }},
      {"div_scalar", {{2, 3}}, [](const TensorList& x) { return DivScalar(x[0], 4.0); }},
      {"relu_positive", {{4, 3}}, [](const TensorList& x) { return Relu(x[0]); }, 0.1, 1.0},
      {"relu_negative", {{4, 3}}, [](const TensorList& x) { return Relu(x[0]); }, -1.0, -0.1},
      {"tanh", {{3, 3}}, [](const TensorList& x) { return Tanh(x[0]); }, -2.0, 2.0},
      {"gelu", {{3, 5}}, [](const TensorList& x) { return Gelu(x[0]); }, -3.0, 3.0},
      {"exp", {{2, 4}}, [](const TensorList& x) { return Exp(x[0]); }},
      {"log", {{2, 4}}, [](const TensorList& x) { return Log(x[0]); }, 0.5, 2.0},
      {"sum", {{3, 4}}, [](const TensorList& x) { return Sum(x[0]); }},
      {"mean", {{3, 4}}, [](const TensorList& x) { return Mean(x[0]); }},
      {"matmul", {{3, 4}, {4, 5}}, [](const TensorList& x) { return Matmul(x[0], x[1]); }},
      {"linear",
       {{5, 4}, {3, 4}, {3}},
       [](const TensorList& x) { return Linear(x[0], x[1], x[2]); }},
      {"linear_no_bias",
       {{5, 4}, {3, 4}},
       [](const TensorList& x) { return Linear(x[0], x[1], Tensor()); }},
      {"linear_relu",
       {{5, 4}, {3, 4}, {3}},
       [](const TensorList& x) { return LinearRelu(x[0], x[1], x[2]); }},
      {"linear_relu_no_bias",
       {{5, 4}, {3, 4}},
       [](const TensorList& x) { return LinearRelu(x[0], x[1], Tensor()); }},
      {"log_softmax", {{4, 6}}, [](const TensorList& x) { return LogSoftmax(x[0]); }, -3.0, 3.0},
      {"cross_entropy_mean",
       {{4, 5}},
       [](const TensorList& x) {
         return CrossEntropy(x[0], Targets({0, 3, 4, 1}));
       },
       -3.0,
       3.0},
      {"cross_entropy_sum_with_offset",
       {{3, 8}},
       [](const TensorList& x) {
         return CrossEntropy(x[0], Targets({0, 1, 2}),
                             {.target_offset = 5, .reduction = Reduction::kSum});
       }},
      {"mse", {{4, 3}, {4, 3}}, [](const TensorList& x) { return Mse(x[0], x[1]); }},
      {"l2_normalize_rows", {{4, 5}}, [](const TensorList& x) { return L2NormalizeRows(x[0]); }},
      {"l2_normalize_rows_clamped",
       {{2, 3}},
       [](const TensorList& x) { return L2NormalizeRows(x[0], /*eps=*/10.0); }},
      {"transpose", {{3, 5}}, [](const TensorList& x) { return Transpose(x[0]); }},
      {"concat",
       {{2, 3}, {4, 3}, {1, 3}},
       [](const TensorList& x) {
         return Concat({x[0], x[1], x[2]});
       }},
      {"slice", {{6, 2}}, [](const TensorList& x) { return Slice(x[0], 1, 4); }},
      {"reshape",
       {{2, 6}},
       [](const TensorList& x) {
         return Reshape(x[0], {3, 4});
       }},
      {"embedding",
       {{5, 3}},
       [](const TensorList& x) {
         return EmbeddingLookup(x[0], Targets({4, 0, 4, 2}));
       }},
      {"sequence_mean",
       {{12, 3}},
       [](const TensorList& x) {
         return SequenceMean(x[0], Targets({2, 4, 1}));  // 3 sequences of L = 4 rows
       }},
      {"linear_3d",
       {{2, 3, 4}, {5, 4}, {5}},
       [](const TensorList& x) { return Linear(x[0], x[1], x[2]); }},
      {"add_trailing",
       {{2, 3, 4}, {3, 4}},
       [](const TensorList& x) { return AddTrailing(x[0], x[1]); }},
      {"layer_norm",
       {{2, 3, 5}, {5}, {5}},
       [](const TensorList& x) { return LayerNorm(x[0], x[1], x[2]); }},
      {"layer_norm_no_bias",
       {{4, 5}, {5}},
       [](const TensorList& x) { return LayerNorm(x[0], x[1], Tensor()); }},
      {"softmax", {{2, 3, 4}}, [](const TensorList& x) { return Softmax(x[0]); }, -3.0, 3.0},
      {"causal_self_attention",
       {{2, 4, 12}},  // B = 2, T = 4, C = 4 in 2 heads
       [](const TensorList& x) { return CausalSelfAttention(x[0], 2); },
       -2.0,
       2.0},
      {"composite_mlp",
       {{4, 3}, {5, 3}, {5}, {2, 5}},
       [](const TensorList& x) {
         return LogSoftmax(Linear(Tanh(Linear(x[0], x[1], x[2])), x[3], Tensor()));
       }},
      {"contrastive_logits",
       {{3, 4}, {3, 4}, {}},
       [](const TensorList& x) {
         // scale * normalize(a) normalize(b)^T, the CLIP logits.
         return Mul(Matmul(L2NormalizeRows(x[0]), Transpose(L2NormalizeRows(x[1]))), Exp(x[2]));
       }},
  };
}

INSTANTIATE_TEST_SUITE_P(Ops, GradCheckTest, testing::ValuesIn(Cases()),
                         [](const testing::TestParamInfo<OpCase>& info) {
                           return info.param.name;
                         });

TEST(GradCheckTest, Float32GradientsAgreeWithFloat64) {
  Generator gen(3);
  Tensor x64 = RandomTensor({4, 6}, gen);
  Tensor w64 = RandomTensor({3, 6}, gen);
  Tensor x32 = x64.To(DType::kFloat32), w32 = w64.To(DType::kFloat32);
  w64.set_requires_grad(true);
  w32.set_requires_grad(true);
  Sum(Gelu(Linear(x64, w64, Tensor()))).Backward();
  Sum(Gelu(Linear(x32, w32, Tensor()))).Backward();
  for (int64_t i = 0; i < w64.numel(); ++i) EXPECT_NEAR(w32.grad().at(i), w64.grad().at(i), 1e-5);
}

TEST(OpErrorsTest, MismatchedShapesNameTheOpAndShapes) {
  Tensor a = Tensor::Zeros({2, 3}), b = Tensor::Zeros({3, 2});
  try {
    Add(a, b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "[add] shapes [2, 3] and [3, 2] differ (only equal shapes or a single-element "
                 "operand are supported)");
  }
  EXPECT_THROW(Matmul(a, a), Error);
  EXPECT_THROW(Add(a, Tensor::Zeros({2, 3}, DType::kFloat64)), Error);
  EXPECT_THROW(Relu(Tensor::Zeros({2}, DType::kInt64)), Error);
}

TEST(OpErrorsTest, CrossEntropyTargetOutOfRangeNamesTheRow) {
  Tensor logits = Tensor::Zeros({2, 3});
  try {
    CrossEntropy(logits, Targets({0, 1}), {.target_offset = 2});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 1 has target 1 + offset 2 = 3"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(EmbeddingLookup(Tensor::Zeros({2, 2}), Targets({2})), Error);
}

// Three sequences of L = 5 rows, lengths 2, 5, 1: rows 2-4 and 11-14 are padding.
Tensor SequenceLengths() { return Targets({2, 5, 1}); }
bool IsPaddingRow(int64_t row) { return (row >= 2 && row < 5) || (row >= 11 && row < 15); }

TEST(SequenceMeanTest, MeansEachSequenceOverItsOwnRows) {
  Tensor x = Tensor::Empty({15, 2}, DType::kFloat64);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = static_cast<double>(i);
  // Row r holds (2r, 2r + 1): sequence 0 averages rows 0-1, 1 rows 5-9, 2 row 10.
  EXPECT_EQ(SequenceMean(x, SequenceLengths()).ToDoubles(),
            (std::vector<double>{1, 2, 14, 15, 20, 21}));
}

// Whatever the padding rows hold — even fed through a layer before the pooling — the output
// and every gradient are the same, and the padding rows' gradient is exactly zero.
TEST(SequenceMeanTest, PaddingChangesNeitherOutputNorGradient) {
  struct Result {
    std::vector<double> out, input_grad, weight_grad;
  };
  auto run = [](double padding) {
    Generator gen(5);
    Tensor input = RandomTensor({15, 3}, gen);
    Tensor weight = RandomTensor({4, 3}, gen);
    const Tensor upstream = RandomTensor({3, 4}, gen);
    for (int64_t row = 0; row < 15; ++row) {
      if (IsPaddingRow(row)) input.Rows(row, row + 1).Fill(padding);
    }
    input.set_requires_grad(true);
    weight.set_requires_grad(true);
    Tensor out = Tanh(SequenceMean(Linear(input, weight, Tensor()), SequenceLengths()));
    Sum(Mul(out, upstream)).Backward();
    return Result{out.ToDoubles(), input.grad().ToDoubles(), weight.grad().ToDoubles()};
  };
  const Result zeros = run(0.0), large = run(1e3), negative = run(-7.5);
  for (const Result* other : {&large, &negative}) {
    EXPECT_EQ(other->out, zeros.out);
    EXPECT_EQ(other->input_grad, zeros.input_grad);
    EXPECT_EQ(other->weight_grad, zeros.weight_grad);
  }
  for (int64_t i = 0; i < 15 * 3; ++i) {
    if (IsPaddingRow(i / 3)) {
      EXPECT_EQ(large.input_grad[i], 0.0) << "padding row " << i / 3;
    } else {
      EXPECT_NE(large.input_grad[i], 0.0) << "valid row " << i / 3;
    }
  }
}

// The error text for a call, or "" when it did not throw.
std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SequenceMeanTest, BadLengthsAreRejectedNamingTheFirst) {
  const Tensor x = Tensor::Zeros({21, 2}, DType::kFloat64);  // 3 sequences of L = 7
  EXPECT_EQ(ErrorOf([&] {
              SequenceMean(x, Targets({7, 1, 0}));
            }),
            "[sequence_mean] lengths[2] = 0 must be in [1, L=7]");
  EXPECT_EQ(ErrorOf([&] {
              SequenceMean(x, Targets({3, 8, -1}));
            }),
            "[sequence_mean] lengths[1] = 8 must be in [1, L=7]");
  EXPECT_EQ(ErrorOf([&] {
              SequenceMean(x, Targets({-2, 1, 1}));
            }),
            "[sequence_mean] lengths[0] = -2 must be in [1, L=7]");
  EXPECT_EQ(ErrorOf([&] {
              SequenceMean(x, Targets({1, 1, 1, 1}));
            }),
            "[sequence_mean] x has 21 rows, not a multiple of the 4 sequences in lengths (x "
            "must hold b padded sequences of L rows each)");
  EXPECT_EQ(ErrorOf([&] {
              SequenceMean(Tensor::Zeros({0, 2}), Targets({1}));
            }),
            "[sequence_mean] lengths[0] = 1 must be in [1, L=0]");
  EXPECT_NE(ErrorOf([&] {
              SequenceMean(x, Tensor::Zeros({0}, DType::kInt64));
            }).find("[sequence_mean] lengths must be int64 of shape [b] with b >= 1"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              SequenceMean(x, Tensor::Full({3}, 1.0));
            }).find("[sequence_mean] lengths must be int64"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              SequenceMean(x.Flatten(), Targets({1}));
            }).find("[sequence_mean] x must be 2-D"),
            std::string::npos);
}

TEST(OpValuesTest, CrossEntropyOfUniformLogitsIsLogClasses) {
  Tensor logits = Tensor::Zeros({3, 4}, DType::kFloat64);
  EXPECT_NEAR(CrossEntropy(logits, Targets({0, 1, 3})).item(), std::log(4.0), 1e-12);
  EXPECT_TRUE(
      std::isnan(CrossEntropy(Tensor::Zeros({0, 4}), Tensor::Zeros({0}, DType::kInt64)).item()));
}

}  // namespace
}  // namespace ddpkit
