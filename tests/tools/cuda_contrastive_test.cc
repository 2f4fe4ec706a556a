// `ddpkit contrastive --device cuda`: every rank of a threads world on cuda:0 gives the CPU's
// gradient-check factors, losses, accuracies and logit scales (float64 throughout, so to ~1e-9).
// Skips, saying why, where no GPU is usable.
#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/cuda/runtime.h"
#include "gtest/gtest.h"
#include "tests/autograd/cuda_test_util.h"
#include "tools/jobs/contrastive/contrastive.h"

namespace ddpkit::jobs {
namespace {

// |a - b| within `rel` of the larger magnitude, or `abs` (for values that are rounding noise,
// such as the exact modes' relative errors of ~1e-16).
void ExpectClose(double a, double b, const std::string& what, double rel = 1e-9,
                 double abs = 1e-12) {
  EXPECT_LE(std::abs(a - b), std::max(abs, rel * std::max(std::abs(a), std::abs(b))))
      << what << ": cpu " << a << " vs cuda " << b;
}

void ExpectSameReport(const ContrastiveReport& cpu, const ContrastiveReport& gpu,
                      int64_t held_out) {
  ASSERT_EQ(cpu.gradient_check_size(), gpu.gradient_check_size());
  for (int i = 0; i < cpu.gradient_check_size(); ++i) {
    const GradientCheckRow &c = cpu.gradient_check(i), &g = gpu.gradient_check(i);
    const std::string name = c.layout() + " + " + c.gather();
    ASSERT_EQ(c.layout(), g.layout());
    ASSERT_EQ(c.gather(), g.gather());
    ExpectClose(c.encoder_rel_error(), g.encoder_rel_error(), name + " rel_error");
    ExpectClose(c.encoder_scale(), g.encoder_scale(), name + " scale");
    ExpectClose(c.encoder_residual(), g.encoder_residual(), name + " residual");
    ExpectClose(c.logit_scale_rel_error(), g.logit_scale_rel_error(), name + " logit_scale_err");
  }
  ASSERT_EQ(cpu.training_size(), gpu.training_size());
  for (int i = 0; i < cpu.training_size(); ++i) {
    const TrainingCurve &c = cpu.training(i), &g = gpu.training(i);
    const std::string name = c.layout() + " + " + c.gather();
    ASSERT_EQ(c.gather(), g.gather());
    ASSERT_EQ(c.losses_size(), g.losses_size()) << name;
    for (int k = 0; k < c.losses_size(); ++k) {
      ExpectClose(c.losses(k), g.losses(k), name + " loss " + std::to_string(k));
    }
    ASSERT_EQ(c.accuracy_size(), g.accuracy_size()) << name;
    for (int k = 0; k < c.accuracy_size(); ++k) {
      // A near-tie in the similarities could flip one pair, nothing more.
      EXPECT_NEAR(c.accuracy(k), g.accuracy(k), 1.0 / static_cast<double>(held_out) + 1e-12)
          << name;
      ExpectClose(c.logit_scale(k), g.logit_scale(k), name + " exp(t)");
    }
  }
}

TEST(CudaContrastiveTest, TheGpuGivesTheCpusFactorsAndLosses) {
  DDPKIT_REQUIRE_GPU();
  struct Case {
    int world;
    std::string optimizer;
    bool unequal_check_rows;
  };
  for (const Case& c : {Case{2, "sgd", false}, Case{4, "sgd", true}, Case{2, "adam", false}}) {
    SCOPED_TRACE("world " + std::to_string(c.world) + ", " + c.optimizer +
                 (c.unequal_check_rows ? ", unequal check rows" : ""));
    ContrastiveConfig config;
    config.world.world_size = c.world;
    config.batch_size = 4;
    config.steps = 4;
    config.eval_every = 2;
    config.held_out = 64;
    config.optimizer = c.optimizer;
    config.lr = c.optimizer == "adam" ? 0.003 : 0.5;
    if (c.unequal_check_rows) {
      for (int r = 0; r < c.world; ++r) config.check_rows.push_back(2 + 3 * r);
    }
    absl::StatusOr<ContrastiveReport> cpu = RunContrastive(config);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    config.device = Device::Cuda(0);
    absl::StatusOr<ContrastiveReport> gpu = RunContrastive(config);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ASSERT_EQ(gpu->gradient_check_size(), 10);
    ASSERT_EQ(gpu->training_size(), 11);  // the reference, then every layout and gather
    ExpectSameReport(*cpu, *gpu, config.held_out);
  }
}

// A GPU that is not there: a FailedPrecondition status naming it, not a crash.
TEST(CudaContrastiveTest, AMissingGpuIsAClearError) {
  DDPKIT_REQUIRE_GPU();
  ContrastiveConfig config;
  config.world.world_size = 2;
  config.batch_size = 2;
  config.steps = 1;
  config.device = Device::Cuda(cuda::DeviceCount());
  absl::StatusOr<ContrastiveReport> report = RunContrastive(config);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition) << report.status();
}

}  // namespace
}  // namespace ddpkit::jobs
