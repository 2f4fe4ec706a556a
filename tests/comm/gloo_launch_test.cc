// Multi-process Gloo jobs started with `ddpkit launch`, as a user would.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "autograd/nn/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/run_command.h"
#include "tests/state_dict_compare.h"

namespace {

using Result = ddpkit::testing_util::CommandResult;

// Failing jobs leave their flight-recorder dumps in the test's temporary folder.
const std::string kDumpDir = ddpkit::testing_util::SendFrDumpsToTempDir("ddpkit_fr_gloo");

// The launcher and its ranks log to stderr between their output lines: keep them in order.
Result RunShell(const std::string& command) {
  return ddpkit::testing_util::RunCommandMerged(command);
}

std::string Launch(int nproc, const std::string& mode, const std::string& env = "") {
  return env + " " +
         DDPKIT_BINARY_DIR "/bin/ddpkit launch --standalone --teardown-grace 8 --nproc-per-node " +
         std::to_string(nproc) + " -- " DDPKIT_BINARY_DIR "/bin/gloo_worker " + mode;
}

class GlooLaunchTest : public testing::TestWithParam<int> {};

TEST_P(GlooLaunchTest, EveryCollectiveMatchesTheLocalReference) {
  Result r = RunShell(Launch(GetParam(), "check"));
  EXPECT_EQ(r.status, 0) << r.out;
  for (int rank = 0; rank < GetParam(); ++rank) {
    EXPECT_TRUE(
        absl::StrContains(r.out, "[rank " + std::to_string(rank) + "] all collectives match"))
        << r.out;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooLaunchTest, testing::Values(1, 2, 3, 4));

// The sample sort's property checks, the same as on the threads world, across processes.
class GlooSampleSortTest : public testing::TestWithParam<int> {};

TEST_P(GlooSampleSortTest, PropertiesHoldAcrossProcesses) {
  Result r = RunShell(Launch(GetParam(), "sample_sort"));
  EXPECT_EQ(r.status, 0) << r.out;
  for (int rank = 0; rank < GetParam(); ++rank) {
    EXPECT_TRUE(
        absl::StrContains(r.out, "[rank " + std::to_string(rank) + "] sample sort properties hold"))
        << r.out;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooSampleSortTest, testing::Values(2, 3));

// The one contract of comm/process_group.h, as threads, mpi and nccl face it
// (tests/comm/backend_contract_test.cc, mpi_launch_test.cc, nccl_test.cc).
TEST(GlooContractTest, TheBackendContractHolds) {
  Result r = RunShell(Launch(2, "contract"));
  EXPECT_EQ(r.status, 0) << r.out;
}

// The ranks each survivor's diagnosis names in "; rank 1 did not reach this collective" or
// "; ranks 1, 2 did not reach ...", one list per such line of `out`.
std::vector<std::vector<int>> RanksNamedAsNotReaching(const std::string& out) {
  std::vector<std::vector<int>> lines;
  for (size_t end = out.find(" did not reach this collective"); end != std::string::npos;
       end = out.find(" did not reach this collective", end + 1)) {
    const size_t start = out.rfind("; rank", end);
    if (start == std::string::npos) continue;
    std::vector<int> ranks;
    for (absl::string_view part : absl::StrSplit(out.substr(start + 6, end - start - 6),
                                                 absl::ByAnyChar(", s"), absl::SkipEmpty())) {
      int rank = -1;
      if (absl::SimpleAtoi(part, &rank)) ranks.push_back(rank);
    }
    lines.push_back(ranks);
  }
  return lines;
}

TEST(GlooFaultTest, ARankThatDiesMakesTheOthersFailAndTheLauncherNamesIt) {
  Result r = RunShell(Launch(3, "die"));
  EXPECT_EQ(r.status, 1) << r.out;  // any failure but a --check verdict's 3 is the launcher's 1
  EXPECT_TRUE(absl::StrContains(r.out, "ddpkit launch: job failed: rank 1")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "exited with code 5")) << r.out;
  // The survivors failed on their own, naming the collective, its sequence number and rank 1.
  EXPECT_TRUE(absl::StrContains(r.out, "ALLREDUCE (sequence number 2, world size 3)")) << r.out;
  // Each survivor names rank 1 alone. A survivor still waiting inside the collective (Gloo's
  // pair to the dead rank is not always the one it waits on) is released when the first to fail
  // closes its links, records itself, and is not named beside the dead rank.
  const std::vector<std::vector<int>> named = RanksNamedAsNotReaching(r.out);
  EXPECT_FALSE(named.empty()) << r.out;
  for (const std::vector<int>& ranks : named) EXPECT_EQ(ranks, std::vector<int>{1}) << r.out;
}

// Rank 1 is alive but never enters the second allreduce; rank 2 enters it 2 s after rank 0 and
// waits there. Rank 0 times out at 5 s and names rank 1 alone: rank 2, alive inside the
// collective, recorded itself (its deadline watch saw rank 0's failure in the store), or was
// released by rank 0 closing its links. Without both it was named beside rank 1.
TEST(GlooFaultTest, ALiveRankWaitingBehindTheFailureIsNotNamedBesideTheStuckOne) {
  Result r = RunShell(Launch(3, "wait_behind"));
  EXPECT_TRUE(absl::StrContains(r.out, "[rank 0] second allreduce: DEADLINE_EXCEEDED")) << r.out;
  const std::vector<std::vector<int>> named = RanksNamedAsNotReaching(r.out);
  EXPECT_FALSE(named.empty()) << r.out;
  for (const std::vector<int>& ranks : named) EXPECT_EQ(ranks, std::vector<int>{1}) << r.out;
}

TEST(GlooFaultTest, MismatchedCollectivesAreCaughtAtDetail) {
  Result r = RunShell(Launch(2, "mismatch", "DDPKIT_DEBUG=DETAIL"));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out,
                                "rank 0 called ALLREDUCE(SUM, float32, 4 elements) but rank 1 "
                                "called ALLREDUCE(SUM, float32, 5 elements)"))
      << r.out;
}

TEST(GlooFaultTest, OutsideTheLauncherTheEnvironmentErrorSaysWhatToDo) {
  Result r = RunShell("env -u RANK -u MASTER_ADDR " DDPKIT_BINARY_DIR "/bin/gloo_worker check");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(absl::StrContains(r.out,
                                "env:// rendezvous: environment variable MASTER_ADDR expected, "
                                "but not set; run under `ddpkit launch`"))
      << r.out;
}

// DDP over Gloo processes trains exactly as the same world of threads: same rows, same
// averaged gradients, same final weights.
TEST(GlooDdpTest, TrainThroughTheLauncherMatchesTheThreadsWorld) {
  const std::string dir = ::testing::TempDir();
  const std::string gloo_weights = dir + "/ddp_gloo.safetensors",
                    threads_weights = dir + "/ddp_threads.safetensors";
  const std::string train = " train --steps 4 --batch-size 8 --bucket-cap-mb-list 0.004,0.01 ";
  Result g = RunShell(
      DDPKIT_BINARY_DIR
      "/bin/ddpkit launch --standalone --teardown-grace 8 --nproc-per-node 2 -- " DDPKIT_BINARY_DIR
      "/bin/ddpkit" +
      train + "--backend gloo --save-weights " + gloo_weights);
  ASSERT_EQ(g.status, 0) << g.out;
  EXPECT_TRUE(absl::StrContains(g.out, "world: 2 ranks (gloo)")) << g.out;
  EXPECT_TRUE(absl::StrContains(g.out, "buckets rebuilt")) << g.out;
  Result t = RunShell(DDPKIT_BINARY_DIR "/bin/ddpkit" + train + "--world-size 2 --save-weights " +
                      threads_weights);
  ASSERT_EQ(t.status, 0) << t.out;
  ddpkit::testing_util::ExpectSameStateDicts(gloo_weights, threads_weights, 1e-6);
}

// Uneven inputs across processes: Join (with the ZeRO optimizer as a second joinable) ends
// with the threads world's model; without Join the job fails and names the rank that left.
TEST(GlooJoinTest, UnevenInputsThroughTheLauncher) {
  const std::string dir = ::testing::TempDir();
  const std::string gloo_weights = dir + "/join_gloo.safetensors",
                    threads_weights = dir + "/join_threads.safetensors";
  const std::string join =
      " join --inputs 2,4,3 --batch-size 4 --model mlp:6,8,3 --optimizer zero-sgd --momentum 0.9 ";
  Result g = RunShell(
      DDPKIT_BINARY_DIR
      "/bin/ddpkit launch --standalone --teardown-grace 8 --nproc-per-node 3 -- " DDPKIT_BINARY_DIR
      "/bin/ddpkit" +
      join + "--backend gloo --save-weights " + gloo_weights);
  ASSERT_EQ(g.status, 0) << g.out;
  EXPECT_TRUE(absl::StrContains(g.out, "shadowing 0 2")) << g.out;
  EXPECT_TRUE(absl::StrContains(g.out, "final models identical on all ranks: yes")) << g.out;
  Result t = RunShell(DDPKIT_BINARY_DIR "/bin/ddpkit" + join + "--save-weights " + threads_weights);
  ASSERT_EQ(t.status, 0) << t.out;
  ddpkit::testing_util::ExpectSameStateDicts(gloo_weights, threads_weights, 1e-6);

  Result n = RunShell(
      DDPKIT_BINARY_DIR
      "/bin/ddpkit launch --standalone --teardown-grace 8 --nproc-per-node 2 -- " DDPKIT_BINARY_DIR
      "/bin/ddpkit join --backend gloo --inputs 3,1 --batch-size 4 "
      "--model mlp:6,8,3 --no-join --timeout 20");
  EXPECT_NE(n.status, 0) << n.out;
  EXPECT_TRUE(absl::StrContains(n.out, "rank 1 did not reach this collective")) << n.out;
  EXPECT_TRUE(absl::StrContains(n.out, "ran out of inputs and left without Join")) << n.out;
}

// A rank that stops (SIGSTOP: alive, silent) cannot dump its recorder; its peers time out in
// the collective it never joined and dump theirs, and the analysis names it from them.
TEST(GlooFrTest, AStoppedRankIsNamedFromItsPeersDumps) {
  const std::string dir = kDumpDir + "_stop";
  std::filesystem::remove_all(dir);
  Result r = RunShell("DDPKIT_FR_DUMP_DIR=" + dir +
                      " " DDPKIT_BINARY_DIR
                      "/bin/ddpkit launch --standalone --teardown-grace 1 --nproc-per-node 3 "
                      "-- " DDPKIT_BINARY_DIR "/bin/gloo_worker stop");
  EXPECT_NE(r.status, 0) << r.out;
  Result a = RunShell(DDPKIT_BINARY_DIR "/bin/ddpkit fr analyze " + dir);
  ASSERT_EQ(a.status, 0) << a.out;
  EXPECT_TRUE(absl::StrContains(a.out, "2 of 3 rank(s) left a dump")) << a.out;
  EXPECT_TRUE(absl::StrContains(a.out,
                                "diagnosis: rank 2 left no dump: it was killed or stopped, or was "
                                "still running; ranks 0, 1 waited"))
      << a.out;
  EXPECT_TRUE(absl::StrContains(a.out,
                                "in ALLREDUCE float32[8] seq 2, which rank 2 never "
                                "completed"))
      << a.out;
  std::filesystem::remove_all(dir);
}

// A traced job across processes: each rank writes its own file on rank 0's clock; merged, the
// trace holds both ranks, and `trace stats` reads it.
TEST(GlooTraceTest, RankFilesMergeIntoOneTrace) {
  const std::string base =
      testing::TempDir() + "/gloo_trace_" + std::to_string(::getpid()) + ".json";
  Result g = RunShell(DDPKIT_BINARY_DIR
                      "/bin/ddpkit launch --standalone --teardown-grace 8 "
                      "--nproc-per-node 2 -- " DDPKIT_BINARY_DIR
                      "/bin/ddpkit train --backend "
                      "gloo --steps 3 --batch-size 8 --trace " +
                      base);
  ASSERT_EQ(g.status, 0) << g.out;
  EXPECT_TRUE(absl::StrContains(g.out, ".rank0.json on each rank")) << g.out;
  Result m = RunShell(DDPKIT_BINARY_DIR "/bin/ddpkit trace merge " + base);
  ASSERT_EQ(m.status, 0) << m.out;
  EXPECT_TRUE(absl::StrContains(m.out, "merged 2 rank(s)")) << m.out;
  std::ifstream in(base);
  const nlohmann::json trace = nlohmann::json::parse(in);
  const nlohmann::json& ranks = trace["otherData"]["ddpkit"]["ranks"];
  ASSERT_EQ(ranks.size(), 2u);
  for (const nlohmann::json& rank : ranks) {
    // One host, one monotonic clock: the true offset is 0. The estimate errs by how much later
    // one rank left the barrier before each measurement than the other — a scheduling delay,
    // tens of µs when the machine is idle, and more than 1 ms under a loaded test run (which
    // failed the old 1 ms bound); 5 ms still catches an offset applied twice or not at all.
    EXPECT_LT(std::abs(rank["clock_offset_us"].get<double>()), 5000) << rank.dump();
  }
  EXPECT_FALSE(trace.contains("distributedInfo"));
  Result s = RunShell(DDPKIT_BINARY_DIR "/bin/ddpkit trace stats " + base + " --json");
  ASSERT_EQ(s.status, 0) << s.out;
  EXPECT_EQ(nlohmann::json::parse(s.out)["ranks"].size(), 2u);
  for (int r = 0; r < 2; ++r) {
    std::filesystem::remove(base.substr(0, base.size() - 5) + ".rank" + std::to_string(r) +
                            ".json");
  }
  std::filesystem::remove(base);
}

// The contrastive reproduction across processes: the gather's backward runs Gloo's
// reduce_scatter / allreduce, and the exact modes stay exact.
TEST(GlooContrastiveTest, GradientCheckThroughTheLauncher) {
  Result r = RunShell(
      DDPKIT_BINARY_DIR
      "/bin/ddpkit launch --standalone --teardown-grace 8 --nproc-per-node 3 -- " DDPKIT_BINARY_DIR
      "/bin/ddpkit contrastive --backend gloo --steps 2 --batch-size 4");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "3 ranks (gloo)")) << r.out;
  for (const char* line :
       {"local   sum", "local   allreduce_slice", "global  sum", "global  allreduce_slice"}) {
    const size_t at = r.out.find(line);
    ASSERT_NE(at, std::string::npos) << line << "\n" << r.out;
    EXPECT_NE(r.out.substr(at, r.out.find('\n', at) - at).find("exact"), std::string::npos) << line;
  }
  EXPECT_TRUE(absl::StrContains(r.out, "a rescale by 0.3333 (1/3)")) << r.out;
}

// --check through the launcher: rank 0's verdict is the job's exit status (3 when it failed),
// so a CI job under `ddpkit launch` tells a wrong result from a crash.
TEST(GlooJoinTest, ACheckVerdictIsTheLaunchersExitStatus) {
  const std::string join = DDPKIT_BINARY_DIR
      "/bin/ddpkit launch --standalone --teardown-grace 8 --nproc-per-node 3 -- " DDPKIT_BINARY_DIR
      "/bin/ddpkit join --backend gloo --inputs 2,4,3 --batch-size 4 --model mlp:6,8,3 "
      "--reference one-process --check";
  Result r = RunShell(join);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "join --check: passed")) << r.out;
  r = RunShell(join + " --divide-by-initial-world-size false --comm-hook allreduce");
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "join --check: FAILED: DDP differs from one process"))
      << r.out;
}

}  // namespace
