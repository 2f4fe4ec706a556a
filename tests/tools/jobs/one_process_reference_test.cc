// `--reference one-process`: DDP under Join, and train's DDP, against one process on the same
// rows — agreeing where they must, and disagreeing where DDP really computes something else.
#include "tools/jobs/one_process_reference.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tools/jobs/join/join_runner.h"
#include "tools/jobs/train/trainer.h"

namespace ddpkit::jobs {
namespace {

JoinRunConfig UnevenJoin() {
  JoinRunConfig config;
  config.inputs = {5, 6, 3, 8};
  config.reference_one_process = true;
  return config;
}

TEST(OneProcessReferenceTest, LossScaleIsWhatDdpsAverageMakesOfTheUnion) {
  EXPECT_DOUBLE_EQ(DdpLossScale("ce", 3, 4, true), 0.75);   // 3 active means, divided by 4
  EXPECT_DOUBLE_EQ(DdpLossScale("ce", 3, 4, false), 1.0);   // divided by the 3 active
  EXPECT_DOUBLE_EQ(DdpLossScale("mse", 4, 4, true), 1.0);   // every rank active
  EXPECT_DOUBLE_EQ(DdpLossScale("sum", 3, 4, true), 0.25);  // a sum only divides
  EXPECT_DOUBLE_EQ(DdpLossScale("sum", 3, 4, false), 1.0 / 3);
}

TEST(OneProcessReferenceTest, JoinOnUnevenInputsEqualsOneProcessInEveryMode) {
  struct Case {
    const char* name;
    std::function<void(JoinRunConfig&)> set;
  };
  const std::vector<Case> cases = {
      {"divide by the initial world size", [](JoinRunConfig&) {}},
      {"divide by the active ranks",
       [](JoinRunConfig& c) { c.divide_by_initial_world_size = false; }},
      {"throw_on_early_termination", [](JoinRunConfig& c) { c.throw_on_early_termination = true; }},
      {"ZeRO-1", [](JoinRunConfig& c) { c.optimizer = "zero-sgd"; }},
      {"a sum loss", [](JoinRunConfig& c) { c.loss = "sum", c.lr = 0.001; }},
      {"a rank with no batch",
       [](JoinRunConfig& c) {
         c.inputs = {0, 4, 2};
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    JoinRunConfig config = UnevenJoin();
    c.set(config);
    absl::StatusOr<JoinReport> report = RunJoin(config);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->reference(), "one-process");
    EXPECT_TRUE(report->reference_agrees())
        << report->reference_max_abs_diff() << " in " << report->reference_worst_parameter();
    EXPECT_LT(report->reference_max_abs_diff(), 1e-6);
  }
}

// The check can fail: PyTorch's allreduce hook divides by the world size whatever
// divide_by_initial_world_size says, so with it DDP does not train the one-process model on
// the active ranks' rows that divide_by_initial_world_size=False promises.
TEST(OneProcessReferenceTest, ACommHookIgnoringDivideByActiveRanksIsCaught) {
  JoinRunConfig config = UnevenJoin();
  config.divide_by_initial_world_size = false;
  config.comm_hook = "allreduce";
  absl::StatusOr<JoinReport> report = RunJoin(config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->reference_agrees());
  EXPECT_GT(report->reference_max_abs_diff(), 100 * report->reference_tolerance());
  // And on even inputs, where every rank is active, the same hook is exact.
  config.inputs = {4, 4, 4, 4};
  report = RunJoin(config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->reference_agrees()) << report->reference_max_abs_diff();
}

TEST(OneProcessReferenceTest, TrainWithAccumulationEqualsOneProcessOnTheGlobalBatch) {
  TrainConfig config;
  config.world.world_size = 3;
  config.steps = 12;
  config.grad_accum = 2;
  config.check_models_identical = true;
  config.reference_one_process = true;
  absl::StatusOr<TrainReport> report = Train(config);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->has_models_identical());
  EXPECT_TRUE(report->models_identical());
  EXPECT_TRUE(report->reference_agrees())
      << report->reference_max_abs_diff() << " in " << report->reference_worst_parameter();
}

TEST(OneProcessReferenceTest, RunsWithoutAOneProcessEquivalentAreRefusedWithTheReason) {
  TrainConfig config;
  config.reference_one_process = true;
  config.steps = 1;
  const std::vector<std::pair<std::function<void(TrainConfig&)>, std::string>> cases = {
      {[](TrainConfig& c) { c.model = "resnet:1,1,1,1,width=8,in=3,classes=10"; }, "BatchNorm"},
      {[](TrainConfig& c) { c.model = "mlp:8,16,4,branch=rank1"; }, "on rank 1 only"},
      {[](TrainConfig& c) { c.comm_hook = "fp16"; }, "compresses the gradients"},
      {[](TrainConfig& c) { c.momentum = 0.9; }, "--momentum"},
  };
  for (const auto& [set, why] : cases) {
    TrainConfig c = config;
    set(c);
    absl::StatusOr<TrainReport> report = Train(c);
    ASSERT_FALSE(report.ok()) << why;
    EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(report.status().message(), why)) << report.status();
  }
  JoinRunConfig join = UnevenJoin();
  join.grad_accum = 2;
  EXPECT_TRUE(absl::StrContains(RunJoin(join).status().message(), "--grad-accum"));
}

TEST(OneProcessReferenceTest, ADivergedReferenceIsAnErrorNotAVerdict) {
  JoinRunConfig config = UnevenJoin();
  config.lr = 1e30;
  absl::StatusOr<JoinReport> report = RunJoin(config);
  ASSERT_FALSE(report.ok());
  EXPECT_TRUE(absl::StrContains(report.status().message(), "diverged")) << report.status();
}

}  // namespace
}  // namespace ddpkit::jobs
