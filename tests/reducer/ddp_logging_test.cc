// The logging data's fields that PyTorch has under the same name, against PyTorch's meaning:
// its string forms of the plans (values from tests/testdata/ddp_plans/1.13.json, PyTorch 1.13's own
// logging data), its sampled `iteration`, and PyTorch 2.x's can_set_static_graph and
// join_uneven_inputs.
#include "gmock/gmock.h"
#include "join/join.h"
#include "tests/reducer/ddp_test_util.h"
#include "tests/reducer/test_models.h"

namespace ddpkit::reducer::testing {
namespace {

// mlp:8,16,16,4 (float32; parameters 0.weight 0.bias 2.weight 2.bias 4.weight 4.bias) with a
// 300-byte first bucket and a 419-byte cap: the example, under PyTorch 1.13's caps (from
// 2.4 a given cap is the first bucket's too).
DdpOptions SmallCaps(DdpOptions options = {}) {
  options.pytorch_version = {1, 13};
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

// A resumed run (docs/reliability.md "Checkpoints") starts from the plan the uninterrupted run
// rebuilt: its buckets and logging data are that plan's before the first iteration, and it never
// rebuilds (a plan unlike any rebuild's stays through three iterations).
TEST(DdpAdoptedPlanTest, StartsFromTheGivenPlanAndNeverRebuilds) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto straight = MakeDdp(nn::MakeMlp({8, 16, 16, 4}, 1), group, SmallCaps());
    EXPECT_FALSE(straight->reducer().RebuiltPlan().has_value());
    TrainMlp(*straight, 1);  // the order is recorded; the rebuild comes at the next forward
    EXPECT_EQ(BucketsToString(straight->reducer().RebuiltPlan()->buckets),
              "[[5, 4, 3], [2], [1, 0]]");
    TrainMlp(*straight, 1);
    const std::optional<BucketAssignment> rebuilt = straight->reducer().RebuiltPlan();
    ASSERT_TRUE(rebuilt.has_value());
    EXPECT_EQ(BucketsToString(rebuilt->buckets), "[[5, 4, 3], [2], [1, 0]]");
    EXPECT_EQ(rebuilt->limits, (std::vector<size_t>{300, 419, 419}));

    auto resumed = MakeDdp(nn::MakeMlp({8, 16, 16, 4}, 1), group, SmallCaps());
    ASSERT_TRUE(resumed->reducer().AdoptRebuiltBuckets(*rebuilt).ok());
    const PyTorchFields& pytorch = resumed->LoggingData().pytorch();
    EXPECT_EQ(pytorch.rebuilt_per_bucket_param_indices(), "5 4 3, 2, 1 0");
    EXPECT_EQ(resumed->reducer().buckets().size(), 3u);

    auto odd = MakeDdp(nn::MakeMlp({8, 16, 16, 4}, 1), group, SmallCaps());
    ASSERT_TRUE(odd->reducer().AdoptRebuiltBuckets({{{0, 1}, {2, 3}, {4, 5}}, {1, 2, 3}}).ok());
    TrainMlp(*odd, 3);
    EXPECT_EQ(odd->LoggingData().pytorch().rebuilt_per_bucket_param_indices(), "0 1, 2 3, 4 5");
    EXPECT_EQ(BucketsToString(odd->reducer().RebuiltPlan()->buckets), "[[0, 1], [2, 3], [4, 5]]");
  });
}

// A plan from a checkpoint is outside bytes: one that does not fit the model is refused, saying
// why, and the reducer goes on as if none had been offered (it rebuilds after its first step).
TEST(DdpAdoptedPlanTest, APlanThatDoesNotFitIsRefusedAndChangesNothing) {
  RunWorld(1, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(nn::MakeMlp({8, 16, 16, 4}, 1), group, SmallCaps());
    auto refusal = [&](const BucketAssignment& plan) {
      const absl::Status status = ddp->reducer().AdoptRebuiltBuckets(plan);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
      return std::string(status.message());
    };
    EXPECT_EQ(refusal({{{5, 4, 3}, {2}, {1, 0, 0}}, {300, 419, 419}}),
              "bucket 2 names parameter 0, which an earlier bucket holds");
    EXPECT_EQ(refusal({{{5, 4, 3, 2, 1, 6}}, {300}}),
              "bucket 0 names parameter 6, but the model has 6");
    EXPECT_EQ(refusal({{{5, 4, 3}, {2}}, {300, 419}}), "no bucket holds parameter 0");
    EXPECT_EQ(refusal({{{5, 4, 3}, {}, {2, 1, 0}}, {1, 2, 3}}), "bucket 1 is empty");
    EXPECT_EQ(refusal({{{5, 4, 3, 2, 1, 0}}, {}}), "the plan has 1 buckets and 0 limits");
    EXPECT_EQ(refusal({}), "the plan has 0 buckets and 0 limits");
    EXPECT_FALSE(ddp->reducer().has_rebuilt_buckets());
    TrainMlp(*ddp, 2);
    EXPECT_EQ(ddp->LoggingData().pytorch().rebuilt_per_bucket_param_indices(), "5 4 3, 2, 1 0");
    const BucketAssignment fits{{{5, 4, 3, 2, 1, 0}}, {300}};
    EXPECT_EQ(ddp->reducer().AdoptRebuiltBuckets(fits).code(),
              absl::StatusCode::kFailedPrecondition);  // already rebuilt

    auto unused = MakeDdp(nn::MakeMlp({8, 16, 16, 4}, 1), group,
                          SmallCaps({.find_unused_parameters = true}));  // never rebuilds
    EXPECT_EQ(unused->reducer().AdoptRebuiltBuckets(fits).code(),
              absl::StatusCode::kFailedPrecondition);
  });
}

// Static graph's first synced backward only counts hooks; the arrival order comes from its
// second, and the rebuild at the third forward. A run resumed after the first step adopts the
// record (docs/reliability.md "Checkpoints"): its first iteration is the uninterrupted run's
// second, recording the same order (without the record it counted hooks again, recorded
// nothing, and rebuilt a step later).
TEST(DdpAdoptedPlanTest, AStaticGraphRecordMakesTheFirstIterationTheSecond) {
  RunWorld(2, [](comm::ProcessGroup& group) {
    auto straight =
        MakeDdp(nn::MakeMlp({8, 16, 16, 4}, 1), group, SmallCaps({.static_graph = true}));
    EXPECT_FALSE(straight->reducer().StaticGraphRecorded().has_value());
    TrainMlp(*straight, 1);
    const std::optional<StaticGraphRecord> record = straight->reducer().StaticGraphRecorded();
    ASSERT_TRUE(record.has_value());
    EXPECT_EQ(record->hook_counts, std::vector<size_t>(6, 1));
    EXPECT_TRUE(record->globally_unused.empty());
    EXPECT_FALSE(straight->reducer().RebuiltPlan().has_value());

    auto resumed =
        MakeDdp(nn::MakeMlp({8, 16, 16, 4}, 1), group, SmallCaps({.static_graph = true}));
    ASSERT_TRUE(resumed->reducer().AdoptStaticGraphRecord(*record).ok());
    EXPECT_FALSE(resumed->reducer().static_graph_first_iteration());
    TrainMlp(*straight, 1);
    TrainMlp(*resumed, 1);
    ASSERT_TRUE(resumed->reducer().RebuiltPlan().has_value());
    EXPECT_EQ(BucketsToString(resumed->reducer().RebuiltPlan()->buckets),
              BucketsToString(straight->reducer().RebuiltPlan()->buckets));
    EXPECT_EQ(resumed->reducer().StaticGraphRecorded()->hook_counts, record->hook_counts);
  });
}

// A record from a checkpoint is outside bytes: one that does not fit is refused, saying why,
// and the reducer counts hooks in its first iteration as if none had been offered.
TEST(DdpAdoptedPlanTest, AStaticGraphRecordThatDoesNotFitIsRefused) {
  RunWorld(1, [](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(nn::MakeMlp({8, 16, 16, 4}, 1), group, SmallCaps({.static_graph = true}));
    auto refusal = [&](const StaticGraphRecord& record) {
      const absl::Status status = ddp->reducer().AdoptStaticGraphRecord(record);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
      return std::string(status.message());
    };
    EXPECT_EQ(refusal({{1, 1, 1, 1, 1}, {}}), "the record has 5 hook counts for 6 parameters");
    EXPECT_EQ(refusal({{1, 1, 1, 1, 1, size_t{1} << 40}, {}}),
              "parameter 5's hook count 1099511627776 is over 1048576");
    EXPECT_EQ(refusal({std::vector<size_t>(6, 1), {6}}), "unused parameter 6 is not below 6");
    EXPECT_EQ(refusal({std::vector<size_t>(6, 1), {3, 3}}),
              "the unused parameters are not ascending at 3");
    EXPECT_FALSE(ddp->reducer().StaticGraphRecorded().has_value());  // nothing adopted
    TrainMlp(*ddp, 1);
    EXPECT_EQ(ddp->reducer().StaticGraphRecorded()->hook_counts, std::vector<size_t>(6, 1));
    EXPECT_EQ(ddp->reducer().AdoptStaticGraphRecord({std::vector<size_t>(6, 1), {}}).code(),
              absl::StatusCode::kFailedPrecondition);  // already recorded

    auto plain = MakeDdp(nn::MakeMlp({8, 16, 16, 4}, 1), group, SmallCaps());
    EXPECT_EQ(plain->reducer().AdoptStaticGraphRecord({std::vector<size_t>(6, 1), {}}).code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_FALSE(plain->reducer().StaticGraphRecorded().has_value());
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
