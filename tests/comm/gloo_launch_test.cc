// Multi-process Gloo jobs started with `ddpkit launch`, as a user would.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace {

struct Result {
  int status;
  std::string output;  // stdout and stderr together
};

Result RunShell(const std::string& command) {
  Result result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string Launch(int nproc, const std::string& mode, const std::string& env = "") {
  return env + " " + DDPKIT_BINARY_DIR "/bin/ddpkit launch --standalone --teardown-grace 8 --nproc-per-node " +
         std::to_string(nproc) + " -- " DDPKIT_BINARY_DIR "/bin/gloo_worker " + mode;
}

class GlooLaunchTest : public testing::TestWithParam<int> {};

TEST_P(GlooLaunchTest, EveryCollectiveMatchesTheLocalReference) {
  Result r = RunShell(Launch(GetParam(), "check"));
  EXPECT_EQ(r.status, 0) << r.output;
  for (int rank = 0; rank < GetParam(); ++rank) {
    EXPECT_TRUE(absl::StrContains(r.output, "[rank " + std::to_string(rank) + "] all collectives match"))
        << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooLaunchTest, testing::Values(1, 2, 3, 4));

TEST(GlooFaultTest, ARankThatDiesMakesTheOthersFailAndTheLauncherNamesIt) {
  Result r = RunShell(Launch(3, "die"));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "ddpkit launch: job failed: rank 1")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "exited with code 3")) << r.output;
  // The survivors failed on their own, naming the collective, its sequence number and rank 1.
  EXPECT_TRUE(absl::StrContains(r.output, "ALLREDUCE (sequence number 2, world size 3)")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "rank 1 did not reach this collective")) << r.output;
}

TEST(GlooFaultTest, MismatchedCollectivesAreCaughtAtDetail) {
  Result r = RunShell(Launch(2, "mismatch", "DDPKIT_DEBUG=DETAIL"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "rank 0 called ALLREDUCE(SUM, float32, 4 elements) but rank 1 "
                                          "called ALLREDUCE(SUM, float32, 5 elements)"))
      << r.output;
}

TEST(GlooFaultTest, OutsideTheLauncherTheEnvironmentErrorSaysWhatToDo) {
  Result r = RunShell("env -u RANK -u MASTER_ADDR " DDPKIT_BINARY_DIR "/bin/gloo_worker check");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(absl::StrContains(r.output, "env:// rendezvous: environment variable MASTER_ADDR expected, "
                                          "but not set; run under `ddpkit launch`"))
      << r.output;
}

}  // namespace
