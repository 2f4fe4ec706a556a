// Round-robin groups (--round-robin-groups) in whole training jobs: DDP's buckets spread over
// K groups train exactly as over one, in a threads world and across Gloo processes.
#include <string>

#include "absl/strings/match.h"
#include "autograd/nn/safetensors.h"
#include "gtest/gtest.h"
#include "tests/run_command.h"
#include "tests/state_dict_compare.h"

namespace {

using Result = ddpkit::testing_util::CommandResult;

// Small buckets: each step's gradients go out as several allreduces, so they alternate.
const std::string kTrain =
    DDPKIT_BINARY_DIR "/bin/ddpkit train --steps 4 --batch-size 8 --bucket-cap-mb-list 0.004,0.01 ";

std::string Launched(const std::string& args) {
  return DDPKIT_BINARY_DIR
         "/bin/ddpkit launch --standalone --teardown-grace 8 --nproc-per-node 2 -- " +
         kTrain + args;
}

TEST(RoundRobinTrainTest, TwoGroupsTrainBitwiseAsOneOnThreads) {
  const std::string one = ::testing::TempDir() + "/rr_threads_k1.safetensors",
                    two = ::testing::TempDir() + "/rr_threads_k2.safetensors";
  Result a =
      ddpkit::testing_util::RunCommandMerged(kTrain + "--world-size 2 --save-weights " + one);
  ASSERT_EQ(a.status, 0) << a.out;
  Result b = ddpkit::testing_util::RunCommandMerged(
      kTrain + "--world-size 2 --round-robin-groups 2 --save-weights " + two);
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_TRUE(absl::StrContains(b.out, "world: 2 ranks (round_robin(threads x2))")) << b.out;
  ddpkit::testing_util::ExpectSameStateDicts(one, two);
}

TEST(RoundRobinTrainTest, TwoGlooGroupsTrainBitwiseAsOneThroughTheLauncher) {
  const std::string one = ::testing::TempDir() + "/rr_gloo_k1.safetensors",
                    two = ::testing::TempDir() + "/rr_gloo_k2.safetensors";
  Result a =
      ddpkit::testing_util::RunCommandMerged(Launched("--backend gloo --save-weights " + one));
  ASSERT_EQ(a.status, 0) << a.out;
  Result b = ddpkit::testing_util::RunCommandMerged(
      Launched("--backend gloo --round-robin-groups 2 --save-weights " + two));
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_TRUE(absl::StrContains(b.out, "world: 2 ranks (round_robin(gloo x2))")) << b.out;
  ddpkit::testing_util::ExpectSameStateDicts(one, two);
}

TEST(RoundRobinTrainTest, ABadGroupCountIsRefusedNamingTheFlag) {
  Result r = ddpkit::testing_util::RunCommandMerged(kTrain + "--round-robin-groups 17");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "--round-robin-groups must be in [1, 16]")) << r.out;
}

}  // namespace
