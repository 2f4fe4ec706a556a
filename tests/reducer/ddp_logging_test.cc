// The logging data's fields that PyTorch has under the same name, against PyTorch's meaning:
// its string forms of the plans (values from tests/testdata/ddp_plans.json, PyTorch 1.13's own
// logging data), its sampled `iteration`, and PyTorch 2.x's can_set_static_graph and
// join_uneven_inputs.
#include "gmock/gmock.h"
#include "join/join.h"
#include "tests/reducer/ddp_test_util.h"
#include "tests/reducer/test_models.h"

namespace ddpkit::reducer::testing {
namespace {

// mlp:8,16,16,4 (float32; parameters 0.weight 0.bias 2.weight 2.bias 4.weight 4.bias) with a
// 300-byte first bucket and a 419-byte cap: the example.
DdpOptions SmallCaps(DdpOptions options = {}) {
  options.bucket_cap_mb = 419.0 / (1 << 20);
  options.first_bucket_mb = 300.0 / (1 << 20);
  return options;
}

void TrainMlp(DistributedDataParallel& ddp, int steps) {
  for (int i = 0; i < steps; ++i) {
    Tensor x = RandomRows(4, 8, i).To(DType::kFloat32);
    CrossEntropy(ddp.Forward(x), Labels(4, 4, i)).Backward();
  }
}

TEST(DdpPyTorchLoggingTest, PlansInPyTorchsStringForm) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(nn::MakeMlp({8, 16, 16, 4}, 1), group, SmallCaps());
    const PyTorchFields& pytorch = ddp->LoggingData().pytorch();
    EXPECT_EQ(pytorch.bucket_sizes(), "1936");
    EXPECT_EQ(pytorch.rebuilt_bucket_sizes(), "");
    TrainMlp(*ddp, 3);
    EXPECT_EQ(pytorch.bucket_sizes(), "1936");
    EXPECT_EQ(pytorch.rebuilt_bucket_sizes(), "336, 1024, 576");
    EXPECT_EQ(pytorch.rebuilt_per_bucket_param_indices(), "5 4 3, 2, 1 0");
    EXPECT_EQ(pytorch.prev_iteration_grad_ready_order_indices(), "5, 4, 3, 2, 1, 0");
  });
}

// find_unused_parameters splits the first plan by size (PyTorch >= 1.12) and never rebuilds.
TEST(DdpPyTorchLoggingTest, FindUnusedPlanInPyTorchsStringForm) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto ddp =
        MakeDdp(nn::MakeMlp({8, 16, 16, 4}, 1), group, SmallCaps({.find_unused_parameters = true}));
    TrainMlp(*ddp, 3);
    const PyTorchFields& pytorch = ddp->LoggingData().pytorch();
    EXPECT_EQ(pytorch.bucket_sizes(), "336, 1088, 512");
    EXPECT_EQ(pytorch.rebuilt_bucket_sizes(), "");
    EXPECT_EQ(pytorch.prev_iteration_grad_ready_order_indices(), "5, 4, 3, 2, 1, 0");
  });
}

// PyTorch 1.13 reads 2 after 3 synced iterations and 4 after 5: "iteration" is set at each
// sampled forward to the iterations completed before it. Past 10 it is sampled every 100th.
TEST(DdpPyTorchLoggingTest, IterationIsPyTorchsSampledCount) {
  RunWorld(1, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(nn::MakeMlp({8, 16, 16, 4}, 1), group);
    const DdpLoggingData& log = ddp->LoggingData();
    EXPECT_EQ(log.pytorch().iteration(), 0);
    std::vector<std::pair<int64_t, int64_t>> seen;  // (ddpkit's, PyTorch's) per step
    for (int i = 0; i < 12; ++i) {
      TrainMlp(*ddp, 1);
      seen.emplace_back(log.iteration(), log.pytorch().iteration());
    }
    EXPECT_EQ(seen[2], std::make_pair(int64_t{3}, int64_t{2}));
    EXPECT_EQ(seen[4], std::make_pair(int64_t{5}, int64_t{4}));
    EXPECT_EQ(seen[10], std::make_pair(int64_t{11}, int64_t{10}));
    EXPECT_EQ(seen[11], std::make_pair(int64_t{12}, int64_t{10}));  // 11 is not sampled
    // no_sync forwards count in neither.
    {
      DistributedDataParallel::NoSyncGuard guard(*ddp);
      TrainMlp(*ddp, 1);
    }
    EXPECT_EQ(log.iteration(), 12);
  });
}

// Rank 0 uses branch "a", the others "b": each rank's unused set stays the same.
TEST(DdpCanSetStaticGraphTest, SameUnusedSetEveryIterationAllowsStaticGraph) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto model = std::make_shared<BranchyNet>(1);
    model->use_a = group.rank() == 0;
    auto ddp = MakeDdp(model, group, {.find_unused_parameters = true});
    EXPECT_TRUE(ddp->LoggingData().can_set_static_graph());
    for (int i = 0; i < 3; ++i) {
      CrossEntropy(ddp->Forward(RandomRows(2, 4, i)), Labels(2, 3, 0)).Backward();
    }
    EXPECT_TRUE(ddp->LoggingData().can_set_static_graph());
  });
}

TEST(DdpCanSetStaticGraphTest, AChangedUnusedSetRulesItOutForGood) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto model = std::make_shared<BranchyNet>(1);
    auto ddp = MakeDdp(model, group, {.find_unused_parameters = true});
    for (int i = 0; i < 4; ++i) {
      model->use_a = i != 1;  // iteration 2 swaps the branches, 3 and 4 swap back
      CrossEntropy(ddp->Forward(RandomRows(2, 4, i)), Labels(2, 3, 0)).Backward();
      EXPECT_EQ(ddp->LoggingData().can_set_static_graph(), i == 0) << "iteration " << i + 1;
    }
  });
}

TEST(DdpCanSetStaticGraphTest, AHookThatFiresTwiceRulesItOut) {
  // Each rank diagnoses its own second firing; the world's status is that error.
  (void)RunWorldStatus(2, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(std::make_shared<TwiceCheckpointedNet>(5), group);
    try {
      CrossEntropy(ddp->Forward(RandomRows(2, 4, 0)), Labels(2, 3, 0)).Backward();
      ADD_FAILURE() << "the second hook firing was not diagnosed";
    } catch (const Error&) {
      EXPECT_FALSE(ddp->LoggingData().can_set_static_graph());
    }
  });
}

TEST(DdpJoinUnevenInputsTest, SetOnlyUnderAnEnabledJoin) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(nn::MakeMlp({8, 16, 16, 4}, 1), group);
    TrainMlp(*ddp, 1);
    EXPECT_FALSE(ddp->LoggingData().join_uneven_inputs());
    join::Join::Run({ddp.get()}, {.enable = false}, [&] { TrainMlp(*ddp, 1); });
    EXPECT_FALSE(ddp->LoggingData().join_uneven_inputs());
    join::Join::Run({ddp.get()}, {}, [&] { TrainMlp(*ddp, group.rank() + 1); });
    EXPECT_TRUE(ddp->LoggingData().join_uneven_inputs());
  });
}

}  // namespace
}  // namespace ddpkit::reducer::testing
