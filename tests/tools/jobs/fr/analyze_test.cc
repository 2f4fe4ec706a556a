// `ddpkit fr analyze` on dumps of real failures: mismatched calls, a rank that failed outside a
// collective, Join left out with uneven inputs, a rank that stopped, a rank without a dump.
#include "tools/jobs/fr/analyze.h"

#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "autograd/base/file_util.h"
#include "comm/threads/threads_world.h"
#include "gtest/gtest.h"
#include "tools/jobs/join/join_runner.h"

namespace ddpkit::jobs::analyze_test {
namespace {

using comm::ProcessGroup;

std::string FreshDir(const std::string& name) {
  const std::string dir =
      testing::TempDir() + "/ddpkit_fr_analyze_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

comm::ProcessGroupOptions DumpInto(const std::string& dir, absl::Duration timeout) {
  comm::ProcessGroupOptions options;
  options.timeout = timeout;
  options.fr_dump_dir = dir;
  return options;
}

absl::Status AllreduceOf(ProcessGroup& group, int64_t n) {
  return group.Allreduce(Tensor::Full({n}, 1.0))->Wait();
}

TEST(FrAnalyzeTest, MismatchedCallsAreNamedWithBothRanks) {
  const std::string dir = FreshDir("mismatch");
  EXPECT_FALSE(comm::RunThreadsWorld(
                   2,
                   [](ProcessGroup& group) -> absl::Status {
                     DDPKIT_RETURN_IF_ERROR(AllreduceOf(group, 4));
                     return AllreduceOf(group, group.rank() == 0 ? 4 : 5);
                   },
                   DumpInto(dir, absl::Seconds(20)))
                   .ok());
  absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_GE(a->findings_size(), 1);
  EXPECT_EQ(a->findings(0).kind(), "mismatch");
  EXPECT_EQ(a->findings(0).seq(), 2);
  EXPECT_TRUE(absl::StrContains(a->diagnosis(),
                                "ranks disagree at seq 2: rank 0 issued "
                                "ALLREDUCE float32[4] seq 2 but rank 1 issued "
                                "ALLREDUCE float32[5] seq 2"))
      << a->diagnosis();
  std::filesystem::remove_all(dir);
}

// Calls are compared as the process group compares them: ranks gather different row counts
// (ALLGATHER_V) without disagreeing, and a broadcast from different roots is a mismatch.
TEST(FrAnalyzeTest, CallsCompareByWhatTheOpNeedsToAgree) {
  const std::string dir = FreshDir("roots");
  EXPECT_FALSE(comm::RunThreadsWorld(
                   2,
                   [](ProcessGroup& group) -> absl::Status {
                     const std::vector<int64_t> counts = {3, 5};
                     DDPKIT_RETURN_IF_ERROR(
                         group
                             .AllgatherV(Tensor::Full({counts[group.rank()]}, 1.0),
                                         Tensor::Zeros({8}), counts)
                             ->Wait());
                     return group.Broadcast(Tensor::Full({4}, 1.0), group.rank())->Wait();
                   },
                   DumpInto(dir, absl::Seconds(20)))
                   .ok());
  absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_GE(a->findings_size(), 1);
  EXPECT_EQ(a->findings(0).kind(), "mismatch");
  EXPECT_EQ(a->findings(0).seq(), 2);
  EXPECT_TRUE(absl::StrContains(a->diagnosis(), "(different roots)")) << a->diagnosis();
  std::filesystem::remove_all(dir);
}

TEST(FrAnalyzeTest, ARankThatFailedOutsideACollectiveNeverIssuedTheNext) {
  const std::string dir = FreshDir("failed");
  EXPECT_FALSE(comm::RunThreadsWorld(
                   3,
                   [](ProcessGroup& group) -> absl::Status {
                     DDPKIT_RETURN_IF_ERROR(AllreduceOf(group, 2));
                     if (group.rank() == 1) return absl::DataLossError("its data file was bad");
                     return AllreduceOf(group, 2);
                   },
                   DumpInto(dir, absl::Seconds(20)))
                   .ok());
  absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->findings(0).kind(), "missing");
  EXPECT_EQ(a->findings(0).ranks(0), 1);
  EXPECT_TRUE(absl::StrContains(a->diagnosis(), "rank 1 never issued ALLREDUCE float32[2] seq 2"))
      << a->diagnosis();
  EXPECT_TRUE(absl::StrContains(a->diagnosis(), "its data file was bad")) << a->diagnosis();
  ASSERT_EQ(a->ranks_size(), 3);
  EXPECT_EQ(a->ranks(1).last_seq(), 1);
  EXPECT_EQ(a->ranks(0).last_seq(), 2);
  std::filesystem::remove_all(dir);
}

// Join disabled with uneven inputs: rank 1 runs one iteration and leaves; rank 0's next
// iteration starts with the rebuild's broadcast, which rank 1 never issues.
TEST(FrAnalyzeTest, JoinLeftOutOnUnevenInputs) {
  const std::string dir = FreshDir("join");
  JoinRunConfig config;
  config.model = "mlp:6,8,3";
  config.batch_size = 4;
  config.inputs = {3, 1};
  config.use_join = false;
  config.world.options = DumpInto(dir, absl::Seconds(20));
  EXPECT_FALSE(RunJoin(config).ok());
  absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->findings(0).kind(), "missing");
  EXPECT_EQ(a->findings(0).ranks(0), 1);
  EXPECT_TRUE(absl::StrContains(a->diagnosis(), "rank 1 never issued BROADCAST")) << a->diagnosis();
  EXPECT_TRUE(absl::StrContains(a->diagnosis(), "(rebuilt_plan)")) << a->diagnosis();
  EXPECT_TRUE(absl::StrContains(a->diagnosis(), "finished its work without an error"))
      << a->diagnosis();
  std::filesystem::remove_all(dir);
}

// Rank 2 stops after one collective (here: sleeps past the timeout); the others wait in the
// second until the timeout and say how long. Without rank 2's dump, its peers still say where
// they waited.
TEST(FrAnalyzeTest, AStoppedRankAndOneWithoutADump) {
  const std::string dir = FreshDir("stopped");
  EXPECT_FALSE(comm::RunThreadsWorld(
                   3,
                   [](ProcessGroup& group) -> absl::Status {
                     DDPKIT_RETURN_IF_ERROR(AllreduceOf(group, 3));
                     if (group.rank() == 2) {
                       std::this_thread::sleep_for(std::chrono::milliseconds(600));
                       return absl::OkStatus();
                     }
                     return AllreduceOf(group, 3);
                   },
                   DumpInto(dir, absl::Milliseconds(300)))
                   .ok());
  absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->findings(0).kind(), "missing");
  EXPECT_EQ(a->findings(0).waiting_ranks_size(), 2);
  EXPECT_GE(a->findings(0).waited_s(), 0.25);
  EXPECT_TRUE(absl::StrContains(a->diagnosis(),
                                "rank 2 never issued ALLREDUCE float32[3] seq 2; "
                                "ranks 0, 1 waited"))
      << a->diagnosis();

  std::filesystem::remove(comm::FlightRecorderDumpPath(dir, 2));
  a = AnalyzeFlightRecorders(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->world_size(), 3);
  EXPECT_FALSE(a->ranks(2).dumped());
  bool no_dump = false;
  for (const FrFinding& f : a->findings()) {
    if (f.kind() != "no_dump") continue;
    no_dump = true;
    EXPECT_EQ(f.seq(), 2);
    EXPECT_TRUE(absl::StrContains(f.text(), "rank 2 left no dump")) << f.text();
    EXPECT_TRUE(absl::StrContains(f.text(), "ranks 0, 1 waited")) << f.text();
  }
  EXPECT_TRUE(no_dump);
  std::filesystem::remove_all(dir);
}

TEST(FrAnalyzeTest, EmptyAndBadDirectoriesSayWhy) {
  const std::string dir = FreshDir("bad");
  std::filesystem::create_directories(dir);
  EXPECT_EQ(AnalyzeFlightRecorders(dir).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteFileAtomically(comm::FlightRecorderDumpPath(dir, 0), "[1, 2]").ok());
  absl::StatusOr<FlightRecorderAnalysis> a = AnalyzeFlightRecorders(dir);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(absl::StrContains(a.status().message(), "not a flight-recorder dump")) << a.status();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ddpkit::jobs::analyze_test
