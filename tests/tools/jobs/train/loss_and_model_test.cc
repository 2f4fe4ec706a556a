// `ddpkit train --loss ce|mse|sum` and the model spec's options (bias=0, unused=1, tied=1): on
// 4 DDP ranks, each gives the gradients one process gives on the same global batch (issue 26:
// the scenarios of PyTorch's own DDP tests, from the command line).
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "autograd/safetensors.h"
#include "gtest/gtest.h"
#include "tools/jobs/train/trainer.h"

namespace ddpkit::jobs {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("ddpkit_loss_model_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// The gradients of the first step of `model` with `loss`, on one process (32 rows) and on 4
// ranks (8 rows each): each tensor of the one is `scale` times the other's.
void ExpectSameGradients(const std::string& model, const std::string& loss, double scale,
                         const reducer::DdpOptions& ddp_options = {}) {
  SCOPED_TRACE(model + " --loss " + loss);
  const std::string one_path = TempPath("one.safetensors"),
                    four_path = TempPath("four.safetensors");
  TrainConfig single;
  single.model = model;
  single.loss = loss;
  single.steps = 1;
  single.batch_size = 32;
  single.save_grads_path = one_path;
  TrainConfig ddp = single;
  ddp.world.world_size = 4;
  ddp.batch_size = 8;
  ddp.ddp = ddp_options;
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

TEST(LossAndModelTest, UnknownLossAndModelOptionsAreRefused) {
  TrainConfig config;
  config.loss = "nll";
  EXPECT_EQ(Train(config).status().message(), "--loss must be ce, mse or sum, got 'nll'");
  config = TrainConfig{};
  config.model = "mlp:32,10,dropout=1";
  EXPECT_EQ(Train(config).status().message(),
            "model spec 'mlp:32,10,dropout=1': unknown option 'dropout'; the options are bias=, "
            "unused= and tied=");
}

}  // namespace
}  // namespace ddpkit::jobs
