// Modules: names, initialisation, structure.
#include "autograd/nn/nn.h"

#include <cmath>

#include "absl/strings/match.h"
#include "autograd/ops.h"
#include "gtest/gtest.h"

namespace ddpkit {
namespace {

std::vector<std::string> Names(const NamedTensors& named) {
  std::vector<std::string> names;
  for (const auto& [name, t] : named) names.push_back(name);
  return names;
}

TEST(NnTest, MlpHasPyTorchSequentialNamesAndShapes) {
  auto mlp = nn::MakeMlp({5, 7, 3, 2}, /*seed=*/0);
  NamedTensors params = mlp->NamedParameters();
  EXPECT_EQ(Names(params), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias",
                                                     "4.weight", "4.bias"}));
  EXPECT_EQ(params[0].second.shape(), (Shape{7, 5}));
  EXPECT_EQ(params[5].second.shape(), (Shape{2}));
  for (const auto& [name, p] : params) EXPECT_TRUE(p.requires_grad() && p.is_leaf()) << name;
  EXPECT_EQ(mlp->Forward(Tensor::Zeros({4, 5})).shape(), (Shape{4, 2}));
  EXPECT_EQ(mlp->DebugString(),
            "Sequential(\n"
            "  (0): Linear(in_features=5, out_features=7, bias=true)\n"
            "  (1): ReLU()\n"
            "  (2): Linear(in_features=7, out_features=3, bias=true)\n"
            "  (3): ReLU()\n"
            "  (4): Linear(in_features=3, out_features=2, bias=true)\n"
            ")");
}

TEST(NnTest, InitIsSeededAndWithinPyTorchBounds) {
  auto a = nn::MakeMlp({16, 4}, /*seed=*/9);
  auto b = nn::MakeMlp({16, 4}, /*seed=*/9);
  auto c = nn::MakeMlp({16, 4}, /*seed=*/10);
  EXPECT_EQ(a->Parameters()[0].ToDoubles(), b->Parameters()[0].ToDoubles());
  EXPECT_NE(a->Parameters()[0].ToDoubles(), c->Parameters()[0].ToDoubles());
  for (double w : a->Parameters()[0].ToDoubles()) EXPECT_LE(std::fabs(w), 0.25);  // 1/sqrt(16)
}

class Tied : public nn::Module {
 public:
  Tied() {
    Generator gen(1);
    first_ = RegisterModule("first", std::make_shared<nn::Linear>(3, 3, false, gen));
    second_ = RegisterModule("second", std::make_shared<nn::Linear>(3, 3, true, gen));
    RegisterParameter("shared", first_->weight());  // the same tensor again
  }
  Tensor Forward(const Tensor& x) override { return second_->Forward(first_->Forward(x)); }

 private:
  std::string Describe() const override { return "Tied"; }
  std::shared_ptr<nn::Linear> first_, second_;
};

TEST(NnTest, SharedParameterAppearsOnceUnderItsFirstName) {
  Tied tied;
  // Own parameters come first, so "shared" is the first name; "first.weight" is dropped.
  EXPECT_EQ(Names(tied.NamedParameters()),
            (std::vector<std::string>{"shared", "second.weight", "second.bias"}));
}

TEST(NnTest, ParseMlpSpec) {
  EXPECT_EQ(*nn::ParseMlpSpec("mlp:784,2048,10"), (std::vector<int64_t>{784, 2048, 10}));
  EXPECT_EQ(nn::ParseMlpSpec("cnn:3").status().message(),
            "model spec 'cnn:3' is not understood; expected mlp:IN,H1,...,OUT, e.g. mlp:32,64,10");
  EXPECT_EQ(nn::ParseMlpSpec("mlp:4,0,2").status().message(),
            "model spec 'mlp:4,0,2': width '0' is not a positive integer");
  EXPECT_FALSE(nn::ParseMlpSpec("mlp:4").ok());
  EXPECT_FALSE(nn::ParseMlpSpec("mlp:4,x").ok());
}

// Found by tests/fuzz/model_spec_fuzz.cc: widths whose products overflow int64 were accepted
// (and `ddpkit buckets --model mlp:9223372036854775807,2` crashed).
TEST(NnTest, ParseMlpSpecRefusesModelsTooLargeToCount) {
  EXPECT_EQ(nn::ParseMlpSpec("mlp:9223372036854775807,2").status().message(),
            "model spec 'mlp:9223372036854775807,2' has more than 68719476736 parameters (from "
            "layer 0: 9223372036854775807 x 2); use smaller widths");
  EXPECT_FALSE(nn::ParseMlpSpec("mlp:4294967296,4294967296").ok());  // 2^64 wraps to 0
  EXPECT_FALSE(nn::ParseMlpSpec("mlp:10,262144,262144,10").ok());    // the sum is too large
  EXPECT_TRUE(nn::ParseMlpSpec("mlp:262143,262144").ok());           // exactly 2^36
}

// The spec's options, named as PyTorch names the same modules.
TEST(NnTest, ModelSpecOptionsNameParametersAsPyTorch) {
  auto no_bias = nn::MakeMlp(*nn::ParseModelSpec("mlp:8,16,16,4,bias=0"), /*seed=*/0);
  EXPECT_EQ(Names(no_bias->NamedParameters()),
            (std::vector<std::string>{"0.weight", "2.weight", "4.weight"}));
  EXPECT_EQ(no_bias->Forward(Tensor::Zeros({3, 8})).shape(), (Shape{3, 4}));
  auto both = nn::MakeMlp(*nn::ParseModelSpec("mlp:8,16,16,16,4,tied=1,unused=1"), 0);
  // 4.weight is 2.weight (listed once, under its first name); "unused" is registered last.
  EXPECT_EQ(Names(both->NamedParameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.bias",
                                      "6.weight", "6.bias", "unused.weight", "unused.bias"}));
  Tensor loss = Sum(both->Forward(Tensor::Full({2, 8}, 1.0)));
  loss.Backward();
  for (const auto& [name, p] : both->NamedParameters()) {
    EXPECT_EQ(p.grad().defined(), !absl::StartsWith(name, "unused")) << name;
  }
}

TEST(NnTest, ParseModelSpecOptions) {
  const nn::MlpSpec spec = *nn::ParseModelSpec("mlp:8,16,16,16,4,unused=1,bias=0,tied=1");
  EXPECT_EQ(spec.widths, (std::vector<int64_t>{8, 16, 16, 16, 4}));
  EXPECT_TRUE(!spec.bias && spec.unused && spec.tied);
  EXPECT_EQ(nn::SpecString(spec), "mlp:8,16,16,16,4,bias=0,unused=1,tied=1");
  EXPECT_EQ(nn::SpecString(*nn::ParseModelSpec("mlp:4,2,bias=1")), "mlp:4,2");
  EXPECT_EQ(nn::ParseModelSpec("mlp:4,2,relu=0").status().message(),
            "model spec 'mlp:4,2,relu=0': unknown option 'relu'; the options are bias=, unused=, "
            "tied= and branch=");
  EXPECT_EQ(nn::ParseModelSpec("mlp:4,2,bias=false").status().message(),
            "model spec 'mlp:4,2,bias=false': option bias takes 0 or 1, not 'false'");
  EXPECT_EQ(nn::ParseModelSpec("mlp:4,2,bias=0,bias=1").status().message(),
            "model spec 'mlp:4,2,bias=0,bias=1': option bias is given twice");
  EXPECT_EQ(nn::ParseModelSpec("mlp:4,bias=0,2").status().message(),
            "model spec 'mlp:4,bias=0,2': width '2' comes after an option");
  EXPECT_FALSE(nn::ParseModelSpec("mlp:8,16,16,4,tied=1").ok());        // no two 16x16 layers
  EXPECT_FALSE(nn::ParseModelSpec("mlp:262143,262144,unused=1").ok());  // unused counts too
  // The tools that build only a plain MLP (the benchmarks) refuse options rather than drop them.
  EXPECT_FALSE(nn::ParseMlpSpec("mlp:4,2,bias=0").ok());
  EXPECT_TRUE(nn::ParseMlpSpec("mlp:4,2,bias=1").ok());
}

// branch=: a Linear "branch" applied to ReLU(output) where its rule says so, in the context the
// training loop sets (PyTorch's control-flow tests).
TEST(NnTest, BranchRunsWhereItsRuleSays) {
  const nn::MlpSpec spec = *nn::ParseModelSpec("mlp:8,16,4,branch=rank1+iters,unused=1");
  EXPECT_EQ(spec.branch, nn::BranchRule::kRank1OddIterations);
  EXPECT_EQ(nn::SpecString(spec), "mlp:8,16,4,unused=1,branch=rank1+iters");
  auto model = nn::MakeMlp(spec, 0);
  EXPECT_EQ(Names(model->NamedParameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "branch.weight",
                                      "branch.bias", "unused.weight", "unused.bias"}));
  auto plain = nn::MakeMlp(*nn::ParseModelSpec("mlp:8,16,4"), 0);
  const Tensor x = Tensor::Full({2, 8}, 1.0);
  const std::vector<double> without = plain->Forward(x).ToDoubles();
  for (int rank : {0, 1}) {
    for (int64_t iteration : {0, 1, 2, 3}) {
      model->SetForwardContext({.rank = rank, .iteration = iteration});
      for (const Tensor& p : model->Parameters()) p.set_grad(Tensor());
      Tensor out = model->Forward(x);
      Sum(out).Backward();
      const bool taken = rank == 1 && iteration % 2 == 1;
      EXPECT_EQ(out.ToDoubles() == without, !taken) << rank << " " << iteration;
      EXPECT_EQ(model->NamedParameters()[4].second.grad().defined(), taken);
    }
  }
  EXPECT_TRUE(nn::BranchTaken(nn::BranchRule::kOddIterations, {.rank = 0, .iteration = 3}));
  EXPECT_FALSE(nn::BranchTaken(nn::BranchRule::kOddIterations, {.rank = 1, .iteration = 2}));
  EXPECT_TRUE(nn::BranchTaken(nn::BranchRule::kRank1, {.rank = 1, .iteration = 2}));
  EXPECT_FALSE(nn::BranchTaken(nn::BranchRule::kRank1, {.rank = 2, .iteration = 1}));
  EXPECT_EQ(nn::SpecString(*nn::ParseModelSpec("mlp:4,2,branch=iters")), "mlp:4,2,branch=iters");
  EXPECT_EQ(nn::SpecString(*nn::ParseModelSpec("mlp:4,2,branch=rank1")), "mlp:4,2,branch=rank1");
  EXPECT_EQ(nn::ParseModelSpec("mlp:4,2,branch=1").status().message(),
            "model spec 'mlp:4,2,branch=1': option branch takes iters, rank1 or rank1+iters, "
            "not '1'");
  EXPECT_EQ(nn::ParseModelSpec("mlp:4,2,branch=iters,branch=rank1").status().message(),
            "model spec 'mlp:4,2,branch=iters,branch=rank1': option branch is given twice");
  EXPECT_FALSE(nn::ParseModelSpec("mlp:262143,262144,branch=iters").ok());  // counts too
  EXPECT_FALSE(nn::ParseMlpSpec("mlp:4,2,branch=iters").ok());
}

TEST(NnTest, EmbeddingModule) {
  Generator gen(3);
  nn::Embedding embedding(10, 4, gen);
  Tensor out = embedding.Forward(Tensor::FromVector<int64_t>({3, 3, 9}, {3}));
  EXPECT_EQ(out.shape(), (Shape{3, 4}));
  EXPECT_EQ(out.Rows(0, 1).ToDoubles(), embedding.weight().Rows(3, 4).ToDoubles());
}

}  // namespace
}  // namespace ddpkit
