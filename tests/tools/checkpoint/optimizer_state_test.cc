// The optimizer state checkpoints save (Optimizer::StateTensors / LoadStateTensors): restored
// into a fresh optimizer, the next steps are bitwise those of the original.
#include <cstring>

#include "absl/strings/match.h"
#include "autograd/nn/optim.h"
#include "gtest/gtest.h"

namespace ddpkit {
namespace {

Tensor Param(std::initializer_list<float> values) {
  Tensor p = Tensor::FromVector<float>(values, {static_cast<int64_t>(values.size())});
  p.set_requires_grad(true);
  return p;
}

void SetGrads(const TensorList& params, float scale) {
  for (const Tensor& p : params) {
    Tensor g = Tensor::Zeros(p.shape());
    for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = scale * static_cast<float>(i + 1);
    p.set_grad(g);
  }
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// Steps `original` twice, copies its state into `restored` (over the same values), then steps
// both twice more with the same gradients: the parameters must agree bit for bit.
template <typename Make>
void ExpectRestoredStepsMatch(Make make, const std::vector<std::string>& expected_keys) {
  TensorList a = {Param({1, 2, 3}), Param({-1, 0.5})};
  std::unique_ptr<Optimizer> original = make(a);
  for (float s : {0.3f, -0.7f}) {
    SetGrads(a, s);
    original->Step();
  }
  std::vector<std::pair<std::string, Tensor>> state = original->StateTensors();
  std::vector<std::string> keys;
  for (const auto& [key, t] : state) keys.push_back(key);
  EXPECT_EQ(keys, expected_keys);

  TensorList b = {Param({0, 0, 0}), Param({0, 0})};
  for (size_t i = 0; i < a.size(); ++i) b[i].CopyFrom(a[i]);
  std::unique_ptr<Optimizer> restored = make(b);
  ASSERT_TRUE(restored->LoadStateTensors(state).ok());
  for (float s : {1.1f, 0.2f}) {
    SetGrads(a, s);
    SetGrads(b, s);
    original->Step();
    restored->Step();
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(SameBits(a[i], b[i])) << "parameter " << i;
}

TEST(OptimizerStateTest, SgdMomentumRestores) {
  ExpectRestoredStepsMatch(
      [](TensorList p) { return std::make_unique<Sgd>(p, SgdOptions{.lr = 0.1, .momentum = 0.9}); },
      {"0.momentum_buffer", "1.momentum_buffer"});
}

TEST(OptimizerStateTest, AdamMomentsAndStepCountRestore) {
  ExpectRestoredStepsMatch(
      [](TensorList p) { return std::make_unique<Adam>(p, AdamOptions{.lr = 0.01}); },
      {"0.exp_avg", "0.exp_avg_sq", "0.step", "1.exp_avg", "1.exp_avg_sq", "1.step"});
}

TEST(OptimizerStateTest, MismatchesAreRefusedNamingTheKeyAndChangeNothing) {
  TensorList p = {Param({1, 2, 3})};
  Sgd sgd(p, {.lr = 0.1, .momentum = 0.9});
  const std::pair<std::vector<std::pair<std::string, Tensor>>, std::string> cases[] = {
      {{{"1.momentum_buffer", Tensor::Zeros({3})}}, "'1.momentum_buffer' is not"},
      {{{"x.momentum_buffer", Tensor::Zeros({3})}}, "'x.momentum_buffer' is not"},
      {{{"0.exp_avg", Tensor::Zeros({3})}}, "unknown state 'exp_avg'"},
      {{{"0.momentum_buffer", Tensor::Zeros({2})}}, "float32 [2], expected float32 [3]"},
      {{{"0.momentum_buffer", Tensor::Zeros({3}, DType::kFloat64)}}, "is float64 [3]"},
  };
  for (const auto& [state, expected] : cases) {
    absl::Status status = sgd.LoadStateTensors(state);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << expected;
    EXPECT_TRUE(absl::StrContains(status.message(), expected)) << status;
  }
  EXPECT_TRUE(sgd.StateTensors().empty());
  Adam adam(p, {});
  EXPECT_TRUE(
      absl::StrContains(adam.LoadStateTensors({{"0.exp_avg", Tensor::Zeros({3})}}).message(),
                        "needs exp_avg, exp_avg_sq and step together"));
}

}  // namespace
}  // namespace ddpkit
