// MPI jobs started with `mpirun`, as a user would (label mpi): the collectives, a stuck rank,
// mismatched calls, and DDP training against the threads world.
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/run_command.h"
#include "tests/state_dict_compare.h"

namespace {

using Result = ddpkit::testing_util::CommandResult;

// OpenMPI refuses root unless told twice (CI runs as root); --oversubscribe lets a 2-core
// machine run 3 or 4 ranks; --tag-output prefixes each line with [job,rank]. Under ASan the
// ranks still check every access, but not leaks at exit: OpenMPI leaves its own allocations
// (in components it has unloaded by then, which no suppression can name) to the process's end.
std::string MpiRun(int ranks, const std::string& program, const std::string& env = "") {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LSAN_OPTIONS=detect_leaks=0 " +
         env + " mpirun --oversubscribe --tag-output -np " + std::to_string(ranks) + " " + program;
}

std::string Worker(const std::string& mode) { return DDPKIT_BINARY_DIR "/bin/mpi_worker " + mode; }

std::string RankLine(int rank, const std::string& text) {
  return "[1," + std::to_string(rank) + "]<stdout>:" + text;
}

class MpiLaunchTest : public testing::TestWithParam<int> {};

TEST_P(MpiLaunchTest, EveryCollectiveMatchesTheLocalReference) {
  Result r = ddpkit::testing_util::RunCommandMerged(MpiRun(GetParam(), Worker("check")));
  EXPECT_EQ(r.status, 0) << r.out;
  for (int rank = 0; rank < GetParam(); ++rank) {
    EXPECT_TRUE(absl::StrContains(r.out, RankLine(rank, "all collectives match"))) << r.out;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, MpiLaunchTest, testing::Values(1, 2, 3));

TEST(MpiRoundRobinTest, EveryCollectiveMatchesOverTwoCommunicators) {
  Result r = ddpkit::testing_util::RunCommandMerged(MpiRun(2, Worker("check_round_robin")));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, RankLine(1, "all collectives match"))) << r.out;
}

// Open MPI's nonblocking allreduce runs the ring from 512 KiB, its own choice below
// (comm/mpi/allreduce_algorithm.h); on a host with more ranks than cores its own at every size;
// and the user's setting, where there is one, at every size. What each call left the variable
// at is read back: 1 ring, 0 libnbc's own choice.
TEST(MpiAllreduceAlgorithmTest, LargeCallsRunTheRingUnlessTheUserChose) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  Result r = ddpkit::testing_util::RunCommandMerged(MpiRun(2, Worker("algorithm")));
  EXPECT_EQ(r.status, 0) << r.out;
  if (cores >= 2) {
    EXPECT_TRUE(absl::StrContains(
        r.out, RankLine(1,
                        "allreduce algorithm: ring from 512 KiB, libnbc's own choice below; "
                        "1 KiB: libnbc's own, 4 MiB: ring")))
        << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, RankLine(1, "after 4194304 bytes: 1"))) << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, RankLine(1, "after 1024 bytes: 0"))) << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, RankLine(1, "after 524288 bytes: 1"))) << r.out;
  }
  EXPECT_TRUE(absl::StrContains(r.out, RankLine(1, "all collectives match"))) << r.out;

  if (const int oversubscribed = cores + 1; oversubscribed <= 9) {  // a few ranks more, not 65
    r = ddpkit::testing_util::RunCommandMerged(MpiRun(oversubscribed, Worker("algorithm")));
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(absl::StrContains(
        r.out, RankLine(0, absl::StrCat("allreduce algorithm: libnbc's own at every size: a host's "
                                        "ranks outnumber its cores (here ",
                                        oversubscribed, " on ", cores,
                                        "); 1 KiB: libnbc's own, 4 MiB: libnbc's own"))))
        << r.out;
    EXPECT_TRUE(absl::StrContains(r.out, RankLine(0, "after 4194304 bytes: 0"))) << r.out;
  }

  r = ddpkit::testing_util::RunCommandMerged(
      MpiRun(2, Worker("algorithm"), "OMPI_MCA_coll_libnbc_iallreduce_algorithm=2"));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(
      r.out, RankLine(1,
                      "allreduce algorithm: the user's coll_libnbc_iallreduce_algorithm=2, "
                      "every size; 1 KiB: the user's, 4 MiB: the user's")))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, RankLine(1, "after 4194304 bytes: 2"))) << r.out;
}

// `bench allreduce` says which algorithm its mpi calls ran, beside its figures.
TEST(MpiAllreduceAlgorithmTest, TheBenchmarkNamesTheAlgorithm) {
  Result r = ddpkit::testing_util::RunCommandMerged(
      MpiRun(2,
             DDPKIT_BINARY_DIR "/bin/ddpkit bench allreduce --backend mpi --min-bytes 1024 "
                               "--max-bytes 1024 --iters 2 --warmup-iters 1",
             "OMPI_MCA_coll_libnbc_iallreduce_algorithm=1"));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(
      r.out, "# mpi allreduce: the user's coll_libnbc_iallreduce_algorithm=1, every size"))
      << r.out;
}

TEST(MpiSampleSortTest, PropertiesHoldAcrossProcesses) {
  Result r = ddpkit::testing_util::RunCommandMerged(MpiRun(3, Worker("sample_sort")));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, RankLine(2, "sample sort properties hold"))) << r.out;
}

// A rank that stops (alive, silent): its peers time out in the collective it never joined,
// name it through the store, and end; mpirun then ends the job.
// The one contract of comm/process_group.h, as threads, gloo and nccl face it
// (tests/comm/backend_contract_test.cc, nccl_test.cc).
TEST(MpiContractTest, TheBackendContractHolds) {
  Result r = ddpkit::testing_util::RunCommandMerged(MpiRun(2, Worker("contract")));
  EXPECT_EQ(r.status, 0) << r.out;
}

TEST(MpiFaultTest, AStoppedRankIsNamedWithinTheTimeout) {
  Result r = ddpkit::testing_util::RunCommandMerged(MpiRun(3, Worker("stop")));
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out,
                                "ALLREDUCE (sequence number 2, world size 3) timed out "
                                "after 5s; rank 2 did not reach this collective"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "MPI cannot cancel a collective")) << r.out;
}

TEST(MpiFaultTest, MismatchedCollectivesAreCaughtAtDetail) {
  Result r =
      ddpkit::testing_util::RunCommandMerged(MpiRun(2, Worker("mismatch"), "DDPKIT_DEBUG=DETAIL"));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out,
                                "rank 0 called ALLREDUCE(SUM, float32, 4 elements) but rank 1 "
                                "called ALLREDUCE(SUM, float32, 5 elements)"))
      << r.out;
}

// DDP over MPI processes trains exactly as the same world of threads.
TEST(MpiDdpTest, TrainUnderMpirunMatchesTheThreadsWorld) {
  const std::string dir = ::testing::TempDir();
  const std::string mpi_weights = dir + "/ddp_mpi.safetensors",
                    threads_weights = dir + "/ddp_threads_for_mpi.safetensors";
  const std::string train = DDPKIT_BINARY_DIR
      "/bin/ddpkit train --steps 4 --batch-size 8 --bucket-cap-mb-list 0.004,0.01 ";
  Result m = ddpkit::testing_util::RunCommandMerged(
      MpiRun(2, train + "--backend mpi --save-weights " + mpi_weights));
  ASSERT_EQ(m.status, 0) << m.out;
  EXPECT_TRUE(absl::StrContains(m.out, "world: 2 ranks (mpi)")) << m.out;
  EXPECT_TRUE(absl::StrContains(m.out, "buckets rebuilt")) << m.out;
  Result t = ddpkit::testing_util::RunCommandMerged(train + "--world-size 2 --save-weights " +
                                                    threads_weights);
  ASSERT_EQ(t.status, 0) << t.out;
  ddpkit::testing_util::ExpectSameStateDicts(mpi_weights, threads_weights, 1e-6);
}

// A warning from an mpi rank says which rank it is, as a threads rank's does ("ddpkit[rank 0]"):
// mpirun passes the ranks' stderr through untagged unless asked.
TEST(MpiDdpTest, ARanksWarningNamesTheRank) {
  Result m = ddpkit::testing_util::RunCommandMerged(
      MpiRun(2, DDPKIT_BINARY_DIR "/bin/ddpkit train --steps 2 --batch-size 8 --backend mpi "
                                  "--find-unused-parameters"));
  ASSERT_EQ(m.status, 0) << m.out;
  EXPECT_TRUE(absl::StrContains(m.out, "ddpkit[rank 0] WARNING find_unused_parameters is on"))
      << m.out;
}

}  // namespace
