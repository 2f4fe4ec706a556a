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

// The same check with real towers (a ResNet with BatchNorm, a GPT without lm_head) on two ranks:
// with the differentiable gather DDP equals one process on the concatenated batch (whose
// BatchNorm normalises each rank's images as that rank does); with a plain all_gather (`none`)
// it does not. float64 throughout, so "equal" is rounding: 1e-10.
TEST(ContrastiveGradientTest, ResNetAndGptTowers) {
  ContrastiveConfig config;
  config.world.world_size = 2;
  config.batch_size = 4;
  config.train = false;
  config.held_out = 8;
  config.pair_classes = 4;
  config.image_tower = "resnet:1,1,1,1,width=4,in=1,stem=small";
  config.text_tower = "gpt:layers=1,heads=2,dim=16,ctx=6,vocab=16";
  config.check_rows = {3, 5};
  absl::StatusOr<ContrastiveReport> report = RunContrastive(config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->image_tower(), config.image_tower);
  for (const char* layout : {"local", "global"}) {
    for (const char* exact : {"sum", "allreduce_slice"}) {
      EXPECT_LT(Row(*report, layout, exact).encoder_rel_error(), 1e-10) << layout << " + " << exact;
    }
  }
  EXPECT_GT(Row(*report, "local", "none").encoder_rel_error(), 0.1);
  EXPECT_GT(Row(*report, "local", "none").encoder_residual(), 0.05);
  EXPECT_EQ(Row(*report, "global", "none").encoder_scale(), 0.0);
  EXPECT_NEAR(Row(*report, "global", "slice").encoder_scale(), 0.5, 1e-10);
  for (const GradientCheckRow& row : report->gradient_check()) {
    EXPECT_LT(row.logit_scale_rel_error(), 1e-10) << row.layout() << " + " << row.gather();
  }
}

// One real tower without the other, or the wrong family, is refused before any work.
TEST(ContrastiveGradientTest, TowersComeInPairsOfTheRightFamilies) {
  ContrastiveConfig config;
  config.world.world_size = 2;
  config.train = false;
  config.image_tower = "resnet:1,1,1,1,width=4,in=1,stem=small";
  EXPECT_EQ(RunContrastive(config).status().code(), absl::StatusCode::kInvalidArgument);
  config.text_tower = "resnet:1,1,1,1";
  EXPECT_TRUE(absl::StrContains(RunContrastive(config).status().message(), "gpt:"));
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
