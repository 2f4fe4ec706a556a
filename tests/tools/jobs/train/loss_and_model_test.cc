// `ddpkit train --loss ce|mse|sum` and the model spec's options (bias=0, unused=1, tied=1,
// branch=): on 4 DDP ranks, each gives the gradients one process gives on the same global batch
// (issue 26: the scenarios of PyTorch's own DDP tests, from the command line).
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "autograd/nn/safetensors.h"
#include "gtest/gtest.h"
#include "tools/jobs/train/trainer.h"

namespace ddpkit::jobs {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("ddpkit_loss_model_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// The gradients of the last of `steps` steps of `model` with `loss`, on one process (32 rows)
// and on 4 ranks (8 rows each): each tensor of the one is `scale` times the other's.
void ExpectSameGradients(const std::string& model, const std::string& loss, double scale,
                         const reducer::DdpOptions& ddp_options = {}, int steps = 1) {
  SCOPED_TRACE(model + " --loss " + loss);
  const std::string one_path = TempPath("one.safetensors"),
                    four_path = TempPath("four.safetensors");
  TrainConfig single;
  single.model = model;
  single.loss = loss;
  single.steps = steps;
  single.batch_size = 32;
  single.save_grads_path = one_path;
  single.ddp = ddp_options;  // a world of one still wraps DDP: a branch needs find_unused there
  TrainConfig ddp = single;
  ddp.world.world_size = 4;
  ddp.batch_size = 8;
  ddp.save_grads_path = four_path;
  absl::StatusOr<TrainReport> a = Train(single), b = Train(ddp);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->loss(), loss);
  absl::StatusOr<SafetensorsFile> x = ReadSafetensors(one_path), y = ReadSafetensors(four_path);
  ASSERT_TRUE(x.ok() && y.ok());
  ASSERT_EQ(x->tensors.size(), y->tensors.size());
  for (const auto& [name, t] : x->tensors) {
    const Tensor* other = y->Find(name);
    ASSERT_NE(other, nullptr) << name;
    for (int64_t i = 0; i < t.numel(); ++i) {
      ASSERT_NEAR(t.at(i), scale * other->at(i), 1e-5 + 1e-4 * std::fabs(t.at(i)))
          << name << "[" << i << "]";
    }
  }
  std::filesystem::remove(one_path);
  std::filesystem::remove(four_path);
}

TEST(LossAndModelTest, EachLossGivesOneProcesssGradients) {
  ExpectSameGradients("mlp:32,64,64,10", "ce", 1);
  ExpectSameGradients("mlp:32,64,64,10", "mse", 1);
  // sum is not a mean: DDP averages the ranks' gradients of their own sums, 1/4 of the whole's.
  ExpectSameGradients("mlp:32,64,64,10", "sum", 4);
}

TEST(LossAndModelTest, ModelOptionsGiveOneProcesssGradients) {
  ExpectSameGradients("mlp:32,64,64,10,bias=0", "ce", 1);
  ExpectSameGradients("mlp:32,64,64,64,10,tied=1", "mse", 1);
  // The unused layer never gets a gradient, so it is not saved on either side.
  ExpectSameGradients("mlp:32,64,64,10,unused=1,bias=0", "ce", 1, {.find_unused_parameters = true});
  ExpectSameGradients("mlp:32,64,64,64,10,tied=1,unused=1", "sum", 4, {.static_graph = true});
}

// branch=iters: the branch is used in odd iterations on every rank (and by the one process), so
// step 1's gradients include it and still are one process's; without find_unused_parameters the
// second step fails with PyTorch's phrase (PyTorch's test_ddp_control_flow_same_across_ranks).
TEST(LossAndModelTest, ControlFlowBranchTrainsUnderFindUnusedAndFailsWithout) {
  ExpectSameGradients("mlp:32,64,10,branch=iters", "ce", 1, {.find_unused_parameters = true},
                      /*steps=*/2);
  TrainConfig config;
  config.model = "mlp:32,64,10,branch=iters";
  config.world.world_size = 2;
  config.ddp.find_unused_parameters = true;
  config.save_grads_path = TempPath("branch.safetensors");
  for (int steps : {1, 2}) {  // step 0 leaves the branch out, step 1 takes it
    config.steps = steps;
    ASSERT_TRUE(Train(config).ok());
    absl::StatusOr<SafetensorsFile> grads = ReadSafetensors(config.save_grads_path);
    ASSERT_TRUE(grads.ok());
    EXPECT_EQ(grads->Find("branch.weight") != nullptr, steps == 2) << steps << " steps";
  }
  std::filesystem::remove(config.save_grads_path);
  config.save_grads_path.clear();
  config.ddp.find_unused_parameters = false;
  absl::StatusOr<TrainReport> failed = Train(config);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("Expected to have finished reduction in the prior "
                                           "iteration before starting a new one"),
            std::string::npos)
      << failed.status();
  config.ddp.find_unused_parameters = true;
  config.steps = 20;
  absl::StatusOr<TrainReport> trained = Train(config);
  ASSERT_TRUE(trained.ok()) << trained.status();
  // It trains: the last branch-free and branch step each beat the first of their kind.
  EXPECT_LT(trained->losses(18), trained->losses(0));
  EXPECT_LT(trained->losses(19), trained->losses(1));
}

TEST(LossAndModelTest, UnknownLossAndModelOptionsAreRefused) {
  TrainConfig config;
  config.loss = "nll";
  EXPECT_EQ(Train(config).status().message(), "--loss must be ce, mse or sum, got 'nll'");
  config = TrainConfig{};
  config.model = "mlp:32,10,dropout=1";
  EXPECT_EQ(Train(config).status().message(),
            "model spec 'mlp:32,10,dropout=1': unknown option 'dropout'; the options are bias=, "
            "unused=, tied= and branch=");
}

}  // namespace
}  // namespace ddpkit::jobs
