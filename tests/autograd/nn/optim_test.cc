// Optimizers (their update rules against PyTorch are in torch_golden_test.cc).
#include "autograd/nn/optim.h"

#include "autograd/ops.h"
#include "tests/autograd/test_util.h"

namespace ddpkit {
namespace {

Tensor Param(std::vector<double> values) { return testing_util::Leaf(std::move(values)); }

TEST(OptimTest, PlainSgdStep) {
  Tensor p = Param({1.0, 2.0});
  Sgd sgd({p}, {.lr = 0.5});
  p.set_grad(Tensor::FromVector<double>({2.0, -2.0}, {2}));
  sgd.Step();
  EXPECT_EQ(p.ToDoubles(), (std::vector<double>{0.0, 3.0}));
}

TEST(OptimTest, SetLrChangesTheNextStep) {
  Tensor p = Param({1.0});
  Sgd sgd({p}, {.lr = 0.5});
  p.set_grad(Tensor::FromVector<double>({1.0}, {1}));
  sgd.set_lr(0.25);
  EXPECT_EQ(sgd.lr(), 0.25);
  sgd.Step();
  EXPECT_EQ(p.item(), 0.75);
}

TEST(OptimTest, ParametersWithoutGradAreSkipped) {
  Tensor p = Param({1.0}), q = Param({1.0});
  Adam adam({p, q}, {.lr = 0.1});
  q.set_grad(Tensor::FromVector<double>({1.0}, {1}));
  adam.Step();
  EXPECT_EQ(p.item(), 1.0);
  EXPECT_NEAR(q.item(), 0.9, 1e-6);  // Adam's first step moves by about lr
}

TEST(OptimTest, ZeroGradToNoneOrInPlace) {
  Tensor p = Param({1.0, 2.0});
  Sgd sgd({p}, {});
  Tensor bucket = Tensor::Full({4}, 7.0, DType::kFloat64);
  p.set_grad(bucket.Rows(1, 3));
  sgd.ZeroGrad(/*set_to_none=*/false);
  EXPECT_TRUE(p.grad().IsAliasOf(bucket.Rows(1, 3)));  // storage kept
  EXPECT_EQ(bucket.ToDoubles(), (std::vector<double>{7, 0, 0, 7}));
  sgd.ZeroGrad();
  EXPECT_FALSE(p.grad().defined());
}

TEST(OptimTest, InvalidOptionsAreRejected) {
  Tensor p = Param({1.0});
  EXPECT_THROW(Sgd({p}, {.lr = -1}), Error);
  EXPECT_THROW(Sgd({p}, {.lr = 0.1, .nesterov = true}), Error);
  EXPECT_THROW(Adam({p}, {.beta1 = 1.0}), Error);
  Tensor not_leaf = MulScalar(p, 2.0);
  EXPECT_THROW(Sgd({not_leaf}, {}), Error);
}

}  // namespace
}  // namespace ddpkit
