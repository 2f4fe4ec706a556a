// PyTorch's test_ddp_control_flow_same_across_ranks and _different_across_ranks, on the model
// spec's branch= layer: a Linear used only in some iterations (on every rank) or only on rank 1
// in some iterations. Under find_unused_parameters every iteration's gradients are one
// process's (the mean over ranks of each rank's own forward), so the branch gets the using
// rank's gradient / W on every rank; without it the second iteration fails with PyTorch's words.
#include "autograd/nn/optim.h"
#include "gmock/gmock.h"
#include "tests/reducer/ddp_test_util.h"
#include "tests/reducer/test_models.h"

namespace ddpkit::reducer::testing {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kIterations = 6;  // PyTorch alternates the branch over six iterations

Tensor Rows(int rank, int iteration) { return RandomRows(3, 6, 100 * iteration + rank); }
Tensor Targets(int rank, int iteration) { return Labels(3, 4, 100 * iteration + rank); }

// One process: each iteration's gradients are those of the mean over ranks of each rank's loss,
// each rank's forward taking its own branch. Returns them per iteration (SGD steps between).
std::vector<Grads> OneProcess(const nn::MlpSpec& spec, int world) {
  auto model = nn::MakeMlp(spec, 5, DType::kFloat64);
  Sgd sgd(model->Parameters(), {.lr = 0.1});
  std::vector<Grads> grads;
  for (int it = 0; it < kIterations; ++it) {
    sgd.ZeroGrad();
    Tensor total;
    for (int r = 0; r < world; ++r) {
      model->SetForwardContext({.rank = r, .iteration = it});
      Tensor loss = CrossEntropy(model->Forward(Rows(r, it)), Targets(r, it)) * (1.0 / world);
      total = total.defined() ? total + loss : loss;
    }
    total.Backward();
    grads.push_back(GradsOf(*model));
    sgd.Step();
  }
  return grads;
}

struct ControlFlowCase {
  std::string spec;
  int world;
};

class DdpControlFlowTest : public ::testing::TestWithParam<ControlFlowCase> {};

TEST_P(DdpControlFlowTest, EveryIterationIsOneProcesssAndTheUnusedSetFollowsTheBranch) {
  const nn::MlpSpec spec = *nn::ParseModelSpec(GetParam().spec);
  const int world = GetParam().world;
  const std::vector<Grads> expected = OneProcess(spec, world);
  RunWorld(world, [&](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp(spec, 5, DType::kFloat64);
    auto ddp = MakeDdp(model, group, {.find_unused_parameters = true});
    Sgd sgd(model->Parameters(), {.lr = 0.1});
    for (int it = 0; it < kIterations; ++it) {
      sgd.ZeroGrad();
      model->SetForwardContext({.rank = group.rank(), .iteration = it});
      CrossEntropy(ddp->Forward(Rows(group.rank(), it)), Targets(group.rank(), it)).Backward();
      // The branch is used on some rank exactly when rank 1 takes it (or, for iters, any rank).
      const bool used = nn::BranchTaken(spec.branch, {.rank = 1, .iteration = it});
      const Grads grads = GradsOf(*model);
      EXPECT_EQ(grads.count("branch.weight"), used ? 1u : 0u) << "iteration " << it;
      EXPECT_TRUE(GradsClose(grads, expected[it], 1e-10, 1e-12)) << "iteration " << it;
      const auto& unused = ddp->LoggingData().unused_parameter_names();
      if (used) {
        EXPECT_THAT(unused, Not(Contains("branch.weight"))) << "iteration " << it;
      } else {
        EXPECT_THAT(unused, Contains("branch.weight")) << "iteration " << it;
      }
      sgd.Step();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(PyTorchsControlFlow, DdpControlFlowTest,
                         ::testing::Values(ControlFlowCase{"mlp:6,8,4,branch=iters", 2},
                                           ControlFlowCase{"mlp:6,8,4,branch=iters", 3},
                                           ControlFlowCase{"mlp:6,8,4,branch=rank1+iters", 2},
                                           ControlFlowCase{"mlp:6,8,4,branch=rank1+iters,bias=0",
                                                           3},
                                           ControlFlowCase{"mlp:6,8,4,branch=rank1", 3}),
                         [](const ::testing::TestParamInfo<ControlFlowCase>& info) {
                           return absl::StrCat(info.index, "_world", info.param.world);
                         });

// Different across ranks, spelled out: in an odd iteration the branch's gradient on every rank
// is rank 1's own gradient divided by W (PyTorch's "lin2's grad = the using rank's / W").
TEST(DdpControlFlowTest, TheBranchGetsTheUsingRanksGradientOverW) {
  const nn::MlpSpec spec = *nn::ParseModelSpec("mlp:6,8,4,branch=rank1+iters");
  const int world = 3;
  auto local = nn::MakeMlp(spec, 5, DType::kFloat64);
  local->SetForwardContext({.rank = 1, .iteration = 1});
  CrossEntropy(local->Forward(Rows(1, 1)), Targets(1, 1)).Backward();
  std::vector<double> expected = GradsOf(*local).at("branch.weight");
  for (double& v : expected) v /= world;
  RunWorld(world, [&](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp(spec, 5, DType::kFloat64);
    auto ddp = MakeDdp(model, group, {.find_unused_parameters = true});
    for (int it = 0; it < 2; ++it) {  // iteration 0 uses it nowhere; 1 on rank 1 only
      for (const Tensor& p : model->Parameters()) p.set_grad(Tensor());
      model->SetForwardContext({.rank = group.rank(), .iteration = it});
      CrossEntropy(ddp->Forward(Rows(group.rank(), it)), Targets(group.rank(), it)).Backward();
    }
    const std::vector<double> got = GradsOf(*model).at("branch.weight");
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-12) << i;
  });
}

// PyTorch's different-graph-across-ranks test: rank 1 uses the branch every iteration, rank 0
// never. find_unused_parameters never rebuilds the buckets; static_graph does (and trains on).
TEST(DdpControlFlowTest, DifferentGraphAcrossRanksRebuildsOnlyUnderStaticGraph) {
  const nn::MlpSpec spec = *nn::ParseModelSpec("mlp:6,8,4,branch=rank1");
  for (const bool static_graph : {false, true}) {
    SCOPED_TRACE(static_graph ? "static_graph" : "find_unused_parameters");
    RunWorld(2, [&](comm::ProcessGroup& group) {
      auto model = nn::MakeMlp(spec, 5, DType::kFloat64);
      auto ddp = MakeDdp(model, group,
                         {.find_unused_parameters = !static_graph, .static_graph = static_graph});
      model->SetForwardContext({.rank = group.rank(), .iteration = 0});
      for (int it = 0; it < 3; ++it) {
        CrossEntropy(ddp->Forward(Rows(group.rank(), it)), Targets(group.rank(), it)).Backward();
      }
      EXPECT_EQ(ddp->LoggingData().has_rebuilt_buckets(), static_graph);
      EXPECT_EQ(GradsOf(*model).count("branch.weight"), 1u) << "rank 1 used it";
    });
  }
}

// Without find_unused_parameters, iteration 0 (branch unused) never finishes its reduction, and
// iteration 1's forward says so with PyTorch's phrase, naming the branch.
TEST(DdpControlFlowTest, WithoutFindUnusedTheSecondIterationFails) {
  const nn::MlpSpec spec = *nn::ParseModelSpec("mlp:6,8,4,branch=iters");
  int forwards_done = 0;
  std::mutex mu;
  absl::Status status = RunWorldStatus(2, [&](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp(spec, 5, DType::kFloat64);
    auto ddp = MakeDdp(model, group);
    for (int it = 0; it < 2; ++it) {
      model->SetForwardContext({.rank = group.rank(), .iteration = it});
      Tensor out = ddp->Forward(Rows(group.rank(), it));
      {
        std::lock_guard<std::mutex> lock(mu);
        ++forwards_done;
      }
      CrossEntropy(out, Targets(group.rank(), it)).Backward();
    }
  });
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(forwards_done, 2) << "every rank fails in iteration 1's forward, not before";
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("Expected to have finished reduction in the prior iteration before "
                              "starting a new one"),
                    HasSubstr("branch.weight"), HasSubstr("branch.bias")));
}

}  // namespace
}  // namespace ddpkit::reducer::testing
