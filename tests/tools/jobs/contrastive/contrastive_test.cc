// The CLIP loss under DDP with each all-gather backward against one process on the whole batch:
// the exact, rescaled and biased cases docs/contrastive.md derives, with different data on
// every rank and unequal row counts.
#include "tools/jobs/contrastive/contrastive.h"

#include <cmath>
#include <mutex>

#include "absl/strings/match.h"
#include "autograd/cuda/runtime.h"
#include "autograd/ops.h"
#include "autograd/random.h"
#include "comm/threads/threads_world.h"
#include "gtest/gtest.h"

namespace ddpkit::jobs {
namespace {

const GradientCheckRow& Row(const ContrastiveReport& report, std::string_view layout,
                            std::string_view gather) {
  for (const GradientCheckRow& row : report.gradient_check()) {
    if (row.layout() == layout && row.gather() == gather) return row;
  }
  ADD_FAILURE() << "no row for " << layout << " + " << gather;
  return report.gradient_check(0);
}

// DDP on n ranks with different data (and unequal row counts) vs one process on the
// concatenated batch: the exact, rescaled and biased cases the reference derives.
TEST(ContrastiveGradientTest, EachModeGivesTheDerivedFactor) {
  for (int world = 2; world <= 4; ++world) {
    for (bool unequal : {false, true}) {
      SCOPED_TRACE("world " + std::to_string(world) + (unequal ? ", unequal rows" : ""));
      ContrastiveConfig config;
      config.world.world_size = world;
      config.batch_size = 4;
      config.train = false;
      if (unequal) {
        for (int r = 0; r < world; ++r) config.check_rows.push_back(2 + 3 * r);
      }
      absl::StatusOr<ContrastiveReport> report = RunContrastive(config);
      ASSERT_TRUE(report.ok()) << report.status();
      ASSERT_EQ(report->gradient_check_size(), 10);
      for (const char* layout : {"local", "global"}) {
        for (const char* exact : {"sum", "allreduce_slice"}) {
          EXPECT_LT(Row(*report, layout, exact).encoder_rel_error(), 1e-12)
              << layout << " + " << exact;
        }
      }
      // global + slice: exactly 1/n, no bias; the logit scale is untouched by the gather.
      EXPECT_NEAR(Row(*report, "global", "slice").encoder_scale(), 1.0 / world, 1e-12);
      EXPECT_LT(Row(*report, "global", "slice").encoder_residual(), 1e-12);
      EXPECT_NEAR(Row(*report, "global", "avg").encoder_scale(), 1.0 / world, 1e-12);
      EXPECT_EQ(Row(*report, "global", "none").encoder_scale(), 0.0);
      // local + slice / none / avg: biased, not a rescale.
      for (const char* biased : {"slice", "none", "avg"}) {
        EXPECT_GT(Row(*report, "local", biased).encoder_residual(), 0.05) << biased;
      }
      for (const GradientCheckRow& row : report->gradient_check()) {
        EXPECT_LT(row.logit_scale_rel_error(), 1e-12) << row.layout() << " + " << row.gather();
      }
    }
  }
}

// --device cuda where no GPU is usable: a FailedPrecondition status that says so, before any
// work (the command line prints it on its Fail path), never a crash. With a GPU,
// cuda_tools_test covers the run.
TEST(ContrastiveGradientTest, CudaWithoutAGpuIsAClearError) {
  if (cuda::DeviceCount() > 0) GTEST_SKIP() << "a GPU is visible (cuda_tools_test runs on it)";
  ContrastiveConfig config;
  config.world.world_size = 2;
  config.batch_size = 2;
  config.steps = 1;
  config.device = Device::Cuda(0);
  absl::StatusOr<ContrastiveReport> report = RunContrastive(config);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition) << report.status();
  EXPECT_TRUE(absl::StrContains(report.status().message(), "not usable")) << report.status();
}

}  // namespace
}  // namespace ddpkit::jobs
