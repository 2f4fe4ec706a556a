// Checkpoints across Gloo processes started by `ddpkit launch`: each process writes its ZeRO-1
// shard, rank 0 commits, and a resumed job ends bitwise where an uninterrupted one does.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "autograd/nn/safetensors.h"
#include "gtest/gtest.h"
#include "tests/run_command.h"
#include "tests/state_dict_compare.h"

namespace {

namespace fs = std::filesystem;
using Result = ddpkit::testing_util::CommandResult;

const std::string kDumpDir = ddpkit::testing_util::SendFrDumpsToTempDir("ddpkit_fr_ckpt_gloo");

Result LaunchTrain(const std::string& args, const std::string& model = "mlp:8,16,16,4",
                   int ranks = 2) {
  return ddpkit::testing_util::RunCommandMerged(
      DDPKIT_BINARY_DIR "/bin/ddpkit launch --standalone --teardown-grace 8 --nproc-per-node " +
      std::to_string(ranks) + " -- " DDPKIT_BINARY_DIR "/bin/ddpkit train --backend gloo --model " +
      model + " --batch-size 8 --optimizer zero-sgd --momentum 0.9 " + args);
}

// Stopped after `stop` of 6 steps and resumed: the weights (and buffers) equal an uninterrupted
// run's. `extra`: more flags for every run.
void ExpectResumeIsBitwise(const std::string& model, const std::string& tag, int ranks = 2,
                           int stop = 3, const std::string& extra = "") {
  const std::string base =
      ::testing::TempDir() + "/ddpkit_ckpt_gloo_" + tag + std::to_string(::getpid());
  const std::string dir = base + "_dir", straight = base + "_straight.safetensors",
                    resumed = base + "_resumed.safetensors";
  fs::remove_all(dir);
  Result s = LaunchTrain(extra + " --steps 6 --save-weights " + straight, model, ranks);
  ASSERT_EQ(s.status, 0) << s.out;
  Result first = LaunchTrain(
      extra + " --steps " + std::to_string(stop) + " --checkpoint-every 2 --checkpoint-dir " + dir,
      model, ranks);
  ASSERT_EQ(first.status, 0) << first.out;
  Result second = LaunchTrain(extra + " --steps 6 --checkpoint-every 2 --checkpoint-dir " + dir +
                                  " --save-weights " + resumed,
                              model, ranks);
  ASSERT_EQ(second.status, 0) << second.out;
  EXPECT_TRUE(absl::StrContains(second.out, "resumed from step " + std::to_string(stop)))
      << second.out;
  ddpkit::testing_util::ExpectSameStateDicts(straight, resumed);
  fs::remove_all(dir);
  fs::remove(straight);
  fs::remove(resumed);
}

// Two processes, each with its own BatchNorm running statistics between broadcasts: rank 0's are
// what the checkpoint keeps, and the resumed job ends bitwise where the uninterrupted one does.
TEST(GlooCheckpointTest, ResNetWithBatchNormBuffersResumesBitwise) {
  ExpectResumeIsBitwise("resnet:1,1,1,1,width=2,in=1,classes=4,stem=small", "resnet");
}

// Three ranks: Gloo's ring sums each element in an order set by where it sits in its bucket, so
// the resume is bitwise only because DDP starts from the bucket plan the checkpoint recorded
// (without it, the first resumed step reduced with the initial plan and the weights differed).
TEST(GlooCheckpointTest, ThreeRanksResumeBitwiseFromTheRecordedBucketPlan) {
  ExpectResumeIsBitwise("mlp:32,64,64,10", "three", 3);
}

// Static graph stopped after its first step, before its second recorded the arrival order:
// bitwise only because the checkpoint keeps the first step's record (without it the resumed run
// counted hooks again in step 2 and rebuilt a step later: its step 3 summed in the initial
// plan's order, the uninterrupted run's in the rebuilt plan's).
TEST(GlooCheckpointTest, ThreeRanksStaticGraphResumedAfterStepOneIsBitwise) {
  ExpectResumeIsBitwise("mlp:32,64,64,10", "static", 3, /*stop=*/1, "--static-graph");
}

TEST(GlooCheckpointTest, ShardedJobStoppedAndResumedEqualsUninterruptedBitwise) {
  const std::string base = ::testing::TempDir() + "/ddpkit_ckpt_gloo_" + std::to_string(::getpid());
  const std::string dir = base + "_dir", straight = base + "_straight.safetensors",
                    resumed = base + "_resumed.safetensors";
  fs::remove_all(dir);
  Result s = LaunchTrain("--steps 6 --save-weights " + straight);
  ASSERT_EQ(s.status, 0) << s.out;

  Result first = LaunchTrain("--steps 3 --checkpoint-every 2 --checkpoint-dir " + dir);
  ASSERT_EQ(first.status, 0) << first.out;
  for (const char* file : {"optimizer.rank-00000.safetensors", "optimizer.rank-00001.safetensors",
                           "model.safetensors", "MANIFEST.json", "state.json"}) {
    EXPECT_TRUE(fs::exists(dir + "/step-00000003/" + file)) << file;
  }
  Result second = LaunchTrain("--steps 6 --checkpoint-every 2 --checkpoint-dir " + dir +
                              " --save-weights " + resumed);
  ASSERT_EQ(second.status, 0) << second.out;
  EXPECT_TRUE(absl::StrContains(second.out, "resumed from step 3")) << second.out;
  ddpkit::testing_util::ExpectSameStateDicts(straight, resumed);
  // No rank left anything half-written behind.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-00000004", "step-00000006"}));
  fs::remove_all(dir);
  fs::remove(straight);
  fs::remove(resumed);
}

}  // namespace
