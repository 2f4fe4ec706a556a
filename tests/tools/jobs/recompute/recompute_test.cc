// `ddpkit recompute`'s job: the error plain DDP meets under reentrant recompute, and the two
// fixes, exact against one process on the global batch.
#include "tools/jobs/recompute/recompute.h"

#include <filesystem>

#include "autograd/base/file_util.h"
#include "gmock/gmock.h"

namespace ddpkit::jobs {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

RecomputeConfig SmallConfig() {
  RecomputeConfig config;
  config.shape = {.input_dim = 6, .width = 8, .blocks = 2, .classes = 3};
  config.batch_size = 4;
  config.steps = 5;
  return config;
}

const RecomputeRun& RunNamed(const RecomputeReport& report, std::string_view name) {
  for (const RecomputeRun& run : report.runs()) {
    if (run.name() == name) return run;
  }
  ADD_FAILURE() << "no run " << name;
  return report.runs(0);
}

TEST(RecomputeTest, PlainDdpStopsAndTheFixesAreExact) {
  for (int world : {2, 3}) {
    SCOPED_TRACE(world);
    RecomputeConfig config = SmallConfig();
    config.world.world_size = world;
    absl::StatusOr<RecomputeReport> report = RunRecompute(config);
    ASSERT_TRUE(report.ok()) << report.status();
    const RecomputeRun& plain = RunNamed(*report, "plain");
    EXPECT_FALSE(plain.ok());
    EXPECT_THAT(plain.error(), AllOf(HasSubstr("rank 0: parameter"), HasSubstr("('blocks."),
                                     HasSubstr("marked ready twice"), HasSubstr("static_graph")));
    for (const char* name : {"static_graph", "no_sync_fused"}) {
      const RecomputeRun& run = RunNamed(*report, name);
      EXPECT_TRUE(run.ok()) << name;
      EXPECT_LT(run.grad_rel_error(), 1e-5) << name;  // float32 rounding, nothing more
      EXPECT_LT(run.param_rel_error(), 1e-4) << name;
      EXPECT_EQ(run.losses_size(), config.steps) << name;
      EXPECT_GT(run.comm_ms(), 0) << name;
      EXPECT_GT(run.bytes_reduced(), 0) << name;
    }
    const RecomputeRun& fused = RunNamed(*report, "no_sync_fused");
    EXPECT_TRUE(fused.bitwise_equal_to_static_graph());
    EXPECT_DOUBLE_EQ(fused.exposed_comm_ms(), fused.comm_ms());  // nothing overlaps it
    EXPECT_EQ(RunNamed(*report, "static_graph").losses(config.steps - 1),
              fused.losses(config.steps - 1));
  }
}

TEST(RecomputeTest, CheckpointingHoldsLessActivationMemory) {
  RecomputeConfig config = SmallConfig();
  config.shape.width = 64;
  config.batch_size = 32;
  config.steps = 1;
  absl::StatusOr<RecomputeReport> report = RunRecompute(config);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->memory_size(), 2);
  const ActivationMemory& without = report->memory(0);
  const ActivationMemory& with = report->memory(1);
  EXPECT_FALSE(without.checkpoint());
  EXPECT_TRUE(with.checkpoint());
  // Without: each block keeps at least its two 4W-wide activations (32 x 256 floats each).
  EXPECT_GE(without.after_forward_bytes(), config.shape.blocks * 2 * 32 * 256 * 4);
  // With: the blocks' inputs (32 x 64 floats), a 4W-wide activation at most.
  EXPECT_LT(with.after_forward_bytes(), without.after_forward_bytes() / 4);
  EXPECT_LT(with.peak_bytes(), without.peak_bytes());
}

TEST(RecomputeTest, TraceWritesBothRunsAndTheSideBySidePicture) {
  const std::string dir = ::testing::TempDir() + "/recompute_trace";
  std::filesystem::create_directories(dir);
  RecomputeConfig config = SmallConfig();
  config.trace_path = dir + "/t.json";
  absl::StatusOr<RecomputeReport> report = RunRecompute(config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(report->trace_files(),
              ::testing::ElementsAre(dir + "/t.static_graph.json", dir + "/t.no_sync_fused.json",
                                     dir + "/t.svg"));
  absl::StatusOr<std::string> svg = ReadFileToString(dir + "/t.svg");
  ASSERT_TRUE(svg.ok());
  EXPECT_THAT(*svg, AllOf(HasSubstr("static_graph (static_graph=true)"),
                          HasSubstr("no_sync_fused (no_sync + FusedGradientAllreduce)")));
}

// --model: a GPT checkpointed per transformer block and a ResNet per stage go through the same
// three runs — plain DDP stops naming a block's parameter, both fixes agree (and for the GPT
// match one process) — and checkpointing holds less activation memory.
TEST(RecomputeTest, ZooModelsAreCheckpointedPerBlockUnderDdp) {
  const std::pair<const char*, const char*> cases[] = {
      {"gpt:layers=2,heads=2,dim=16,ctx=8,vocab=16", "('transformer.h."},
      {"resnet:1,1,1,1,width=4,in=1,classes=3,stem=small", "('layer"}};
  for (const auto& [model, names] : cases) {
    SCOPED_TRACE(model);
    RecomputeConfig config = SmallConfig();
    config.model = model;
    config.steps = 3;
    absl::StatusOr<RecomputeReport> report = RunRecompute(config);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->model(), model);
    EXPECT_EQ(report->blocks(), std::string_view(model).starts_with("gpt") ? 2 : 4);
    EXPECT_THAT(RunNamed(*report, "plain").error(),
                AllOf(HasSubstr(names), HasSubstr("marked ready twice")));
    // A ResNet's BatchNorm normalises each rank's batch by its own statistics, so one process
    // on the global batch is not its oracle (SyncBatchNorm would be); the fixes still agree.
    const bool batch_norm = std::string_view(model).starts_with("resnet");
    for (const char* name : {"static_graph", "no_sync_fused"}) {
      const RecomputeRun& run = RunNamed(*report, name);
      EXPECT_TRUE(run.ok()) << name;
      if (batch_norm) continue;
      EXPECT_LT(run.grad_rel_error(), 1e-5) << name;
      EXPECT_LT(run.param_rel_error(), 1e-4) << name;
    }
    EXPECT_TRUE(RunNamed(*report, "no_sync_fused").bitwise_equal_to_static_graph());
    ASSERT_EQ(report->memory_size(), 2);
    EXPECT_LT(report->memory(1).after_forward_bytes(), report->memory(0).after_forward_bytes());
  }
  RecomputeConfig mlp = SmallConfig();
  mlp.model = "mlp:4,8,3";
  EXPECT_THAT(std::string(RunRecompute(mlp).status().message()),
              AllOf(HasSubstr("--model mlp:4,8,3"), HasSubstr("no blocks to checkpoint")));
}

TEST(RecomputeTest, BadConfigNamesTheFlag) {
  RecomputeConfig config = SmallConfig();
  config.shape.blocks = 0;
  EXPECT_THAT(std::string(RunRecompute(config).status().message()), HasSubstr("--blocks"));
  config = SmallConfig();
  config.shape.width = 1 << 20;
  EXPECT_THAT(std::string(RunRecompute(config).status().message()), HasSubstr("--width"));
  config = SmallConfig();
  config.steps = 0;
  EXPECT_THAT(std::string(RunRecompute(config).status().message()), HasSubstr("--steps"));
  config = SmallConfig();
  config.shape.width = 8192;
  config.batch_size = 1 << 22;  // terabytes of activations
  EXPECT_THAT(std::string(RunRecompute(config).status().message()), HasSubstr("--batch-size"));
}

}  // namespace
}  // namespace ddpkit::jobs
