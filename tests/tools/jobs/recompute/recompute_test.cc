// `ddpkit recompute`'s job: the error plain DDP meets under reentrant recompute, and the two
// fixes, exact against one process on the global batch.
#include "tools/jobs/recompute/recompute.h"

#include <filesystem>

#include "autograd/file_util.h"
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
