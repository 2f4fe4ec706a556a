// The training loop behind `ddpkit train`.
#include "tools/jobs/train/trainer.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "autograd/nn/nn.h"
#include "autograd/nn/safetensors.h"
#include "gtest/gtest.h"
#include "tools/jobs/dataset.h"

namespace ddpkit::jobs::trainer_test {
namespace {

// Train's report, or the error.
absl::StatusOr<TrainReport> TrainReportOf(const TrainConfig& config) { return Train(config); }

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("ddpkit_trainer_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(TrainerTest, LossFallsOnTheDefaultTaskWithin60Steps) {
  absl::StatusOr<TrainReport> report = TrainReportOf(TrainConfig{});
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->losses_size(), 60);
  const double first = report->losses(0), last = report->losses(59);
  EXPECT_LT(last, 0.5 * first) << first << " -> " << last;
  EXPECT_GT(report->final_accuracy(), 0.9);
  EXPECT_EQ(report->parameter_names_size(), 6);
  EXPECT_EQ(report->num_parameters(), 32 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10);
}

TEST(TrainerTest, SameSeedSameLosses) {
  TrainConfig config;
  config.steps = 5;
  EXPECT_EQ(TrainReportOf(config)->losses(4), TrainReportOf(config)->losses(4));
  config.seed = 1;
  TrainConfig other = config;
  other.seed = 2;
  EXPECT_NE(TrainReportOf(config)->losses(4), TrainReportOf(other)->losses(4));
}

// The trainer's contract: N ranks with b rows each train exactly like one process with N*b
// rows, with and without gradient accumulation and across DDP's options.
// ZeRO-1 changes where the optimizer state lives, not the numbers (gradient accumulation
// included: the step follows the synced micro-batch).
TEST(TrainerTest, ZeroShardedSgdTrainsExactlyAsSgd) {
  TrainConfig config;
  config.steps = 6;
  config.grad_accum = 2;
  config.momentum = 0.9;
  config.world.world_size = 3;
  absl::StatusOr<TrainReport> sgd = TrainReportOf(config);
  config.optimizer = "zero-sgd";
  absl::StatusOr<TrainReport> zero = TrainReportOf(config);
  ASSERT_TRUE(sgd.ok() && zero.ok()) << sgd.status() << zero.status();
  ASSERT_EQ(zero->losses_size(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(zero->losses(i), sgd->losses(i)) << "step " << i;
  EXPECT_EQ(zero->optimizer(), "zero-sgd");
  EXPECT_LT(zero->elements_stepped(), sgd->elements_stepped());  // rank 0 steps only its shard
}

TEST(TrainerTest, DataParallelRunEqualsOneProcessOnTheGlobalBatch) {
  const std::string single_grads = TempPath("g1.safetensors"),
                    ddp_grads = TempPath("g4.safetensors");
  const std::string single_weights = TempPath("w1.safetensors"),
                    ddp_weights = TempPath("w4.safetensors");
  for (int grad_accum : {1, 3}) {
    TrainConfig single;
    single.steps = 4;
    single.batch_size = 32;
    single.grad_accum = grad_accum;
    single.save_grads_path = single_grads;
    single.save_weights_path = single_weights;
    TrainConfig ddp = single;
    ddp.world.world_size = 4;
    ddp.batch_size = 8;
    ddp.ddp = {.pytorch_version = {1, 13},  // a first bucket of its own beside a given cap
               .bucket_cap_mb = 0.01,
               .first_bucket_mb = 0.004,
               .find_unused_parameters = grad_accum == 3,
               .gradient_as_bucket_view = true};
    ddp.save_grads_path = ddp_grads;
    ddp.save_weights_path = ddp_weights;
    absl::StatusOr<TrainReport> a = TrainReportOf(single), b = TrainReportOf(ddp);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->world_size(), 4);
    for (int step = 0; step < 4; ++step) EXPECT_NEAR(a->losses(step), b->losses(step), 1e-5);
    for (const auto& [one, four] :
         {std::pair{single_grads, ddp_grads}, std::pair{single_weights, ddp_weights}}) {
      absl::StatusOr<SafetensorsFile> x = ReadSafetensors(one), y = ReadSafetensors(four);
      ASSERT_TRUE(x.ok() && y.ok());
      ASSERT_EQ(x->tensors.size(), 6u);
      for (const auto& [name, t] : x->tensors) {
        const Tensor* other = y->Find(name);
        ASSERT_NE(other, nullptr) << name;
        for (int64_t i = 0; i < t.numel(); ++i) {
          ASSERT_NEAR(t.at(i), other->at(i), 1e-5 + 1e-4 * std::fabs(t.at(i)))
              << name << "[" << i << "] in " << one;
        }
      }
    }
  }
  for (const auto& p : {single_grads, ddp_grads, single_weights, ddp_weights})
    std::filesystem::remove(p);
}

// PyTorch's own DistributedDataParallel (1.13, gloo, 2 processes) as the oracle: same initial
// weights, same rows per rank, three SGD steps; the last step's averaged gradients and the final
// weights must match (tools/scripts/golden/make_torch_golden.py wrote
// the files).
TEST(TrainerTest, MatchesPyTorchDdpGoldenRun) {
  const std::string testdata = DDPKIT_TESTDATA_DIR;
  const std::string grads_path = TempPath("torch_ddp_grads.safetensors");
  const std::string weights_path = TempPath("torch_ddp_final.safetensors");
  TrainConfig config;
  config.model = "mlp:4,8,3";
  config.weights_path = testdata + "/torch_ddp_weights.safetensors";
  config.data_path = testdata + "/torch_ddp_data.safetensors";
  config.world.world_size = 2;
  config.batch_size = 4;
  config.steps = 3;
  config.lr = 0.1;
  config.save_grads_path = grads_path;
  config.save_weights_path = weights_path;
  ASSERT_TRUE(Train(config).ok());
  absl::StatusOr<SafetensorsFile> expected =
      ReadSafetensors(testdata + "/torch_ddp_expected.safetensors");
  absl::StatusOr<SafetensorsFile> grads = ReadSafetensors(grads_path),
                                  weights = ReadSafetensors(weights_path);
  ASSERT_TRUE(expected.ok() && grads.ok() && weights.ok());
  int compared = 0;
  for (const auto& [name, want] : expected->tensors) {
    const bool is_grad = absl::StartsWith(name, "grad.");
    const std::string param = name.substr(name.find('.') + 1);
    const Tensor* got = (is_grad ? *grads : *weights).Find(param);
    ASSERT_NE(got, nullptr) << name;
    for (int64_t i = 0; i < want.numel(); ++i) {
      EXPECT_NEAR(got->at(i), want.at(i), 1e-6 + 1e-5 * std::fabs(want.at(i)))
          << name << "[" << i << "]";
    }
    ++compared;
  }
  EXPECT_EQ(compared, 8);  // 4 gradients, 4 final weights
  std::filesystem::remove(grads_path);
  std::filesystem::remove(weights_path);
}

TEST(TrainerTest, SavedWeightsReloadAndDataFileIsUsed) {
  const std::string weights = TempPath("w.safetensors"), data = TempPath("d.safetensors");
  ClassificationData synthetic = MakeSyntheticClassification(64, 4, 3, /*seed=*/5);
  ASSERT_TRUE(WriteSafetensors(data, {{"x", synthetic.x}, {"y", synthetic.y}}).ok());

  TrainConfig config;
  config.model = "mlp:4,8,3";
  config.data_path = data;
  config.steps = 20;
  config.save_weights_path = weights;
  absl::StatusOr<TrainReport> first = TrainReportOf(config);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->data(), data);

  // Continuing from the saved weights starts where the first run ended.
  config.weights_path = weights;
  config.save_weights_path.clear();
  config.steps = 1;
  absl::StatusOr<TrainReport> resumed = TrainReportOf(config);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_LT(resumed->losses(0), first->losses(0));
  std::filesystem::remove(weights);
  std::filesystem::remove(data);
}

TEST(TrainerTest, BadDataFilesNameTheFileAndTensor) {
  const std::string path = TempPath("bad.safetensors");
  TrainConfig config;
  config.model = "mlp:4,3";
  config.data_path = path;
  auto expect_error = [&](const NamedTensors& tensors, const std::string& expected) {
    ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
    absl::StatusOr<TrainReport> report = TrainReportOf(config);
    ASSERT_FALSE(report.ok());
    EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(report.status().message(), path + ": " + expected))
        << report.status();
  };
  Tensor y = Tensor::FromVector<int64_t>({0, 2}, {2});
  expect_error({{"x", Tensor::Zeros({2, 4})}}, "needs tensors 'x'");
  expect_error({{"x", Tensor::Zeros({2, 5})}, {"y", y}},
               "tensor 'x' has 5 columns but the model's input width is 4");
  expect_error({{"x", Tensor::Zeros({2, 4})}, {"y", Tensor::Zeros({2})}},
               "tensor 'y' must be int64 [2]");
  expect_error({{"x", Tensor::Zeros({2, 4})}, {"y", Tensor::FromVector<int64_t>({0, 3}, {2})}},
               "tensor 'y' row 1 has label 3, outside the model's 3 output classes");
  std::filesystem::remove(path);
}

TEST(TrainerTest, InvalidConfigIsRejectedBeforeTraining) {
  TrainConfig config;
  config.batch_size = 0;
  EXPECT_EQ(TrainReportOf(config).status().message(), "--batch-size must be positive, got 0");
  config = TrainConfig{};
  config.model = "mlp:4,x";
  EXPECT_EQ(TrainReportOf(config).status().code(), absl::StatusCode::kInvalidArgument);
  config = TrainConfig{};
  config.weights_path = "/nonexistent.safetensors";
  EXPECT_FALSE(TrainReportOf(config).ok());
}

// PowerSGD on the default task: it compresses from its start iteration on, reports the bytes it
// sent against a plain allreduce, and the loss still falls (behind allreduce's).
TEST(TrainerTest, PowerSgdCompressesAndStillLearns) {
  TrainConfig config;
  config.world.world_size = 2;
  absl::StatusOr<TrainReport> plain = TrainReportOf(config);
  config.comm_hook = "powersgd";
  config.powersgd = {.start_iteration = 10};
  absl::StatusOr<TrainReport> powersgd = TrainReportOf(config);
  ASSERT_TRUE(plain.ok() && powersgd.ok()) << plain.status() << powersgd.status();
  // Plain allreduce for iterations 0-9: the weights part from iteration 10's update on.
  EXPECT_EQ(powersgd->losses(10), plain->losses(10));
  EXPECT_NE(powersgd->losses(11), plain->losses(11));
  EXPECT_LT(powersgd->losses(59), 0.2 * powersgd->losses(0));
  EXPECT_GT(powersgd->final_accuracy(), 0.9);
  const reducer::CompressionStats& c = powersgd->ddp().compression();
  EXPECT_EQ(c.allreduce_bytes_per_step(), 4 * powersgd->num_parameters());
  // Rank 1: 10x64, 64x64 and 64x32 as (n + m) numbers each, the 138 biases as they are.
  EXPECT_EQ(c.wire_bytes_per_step(), 4 * (74 + 128 + 96 + 138));
  EXPECT_GT(c.compression_ratio(), 15);
  EXPECT_FALSE(plain->ddp().has_compression());
}

TEST(TrainerTest, PowerSgdRefusesCheckpointsAndBadOptions) {
  TrainConfig config;
  config.comm_hook = "powersgd";
  config.powersgd = {.start_iteration = 1};
  EXPECT_TRUE(absl::StrContains(TrainReportOf(config).status().message(), "must be > 1"));
  config.powersgd = {.start_iteration = 10};
  config.checkpoint.dir = TempPath("powersgd_checkpoints");
  EXPECT_TRUE(absl::StrContains(TrainReportOf(config).status().message(), "not checkpointed"));
  config = TrainConfig{};
  config.comm_hook = "powersdg";
  EXPECT_TRUE(absl::StrContains(TrainReportOf(config).status().message(), "batched_powersgd"));
}

}  // namespace
}  // namespace ddpkit::jobs::trainer_test
