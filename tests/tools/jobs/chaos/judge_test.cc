// How `ddpkit chaos` judges a trial from its log (tools/jobs/chaos/chaos.cc, JudgeTrial): the
// logs here are the shapes real trials wrote.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tools/jobs/chaos/chaos.h"

namespace ddpkit::jobs {
namespace {

ChaosTrial Stopped(int victim) {
  ChaosTrial row;
  row.set_job("join");
  row.set_signal("STOP");
  row.set_victim(victim);
  row.set_exit_code(1);
  return row;
}

constexpr char kLauncherFailed[] = "ddpkit launch: job failed: rank 3 (pid 77) exited with code 1";

TEST(ChaosJudgeTest, AStoppedRankIsClearOnlyWhenASurvivorNamesIt) {
  ChaosTrial named = Stopped(1);
  JudgeTrial(absl::StrCat("[rank 2] ddpkit join: gloo: rank 2 of 4 could not connect to its peers:"
                          " timed out; rank 1 did not arrive at the rendezvous\n",
                          kLauncherFailed, "\n"),
             named);
  EXPECT_TRUE(named.clear_error()) << named.diagnosis();

  ChaosTrial unnamed = Stopped(1);
  JudgeTrial(absl::StrCat("[rank 2] ddpkit join: ALLREDUCE failed: timed out\n", kLauncherFailed),
             unnamed);
  EXPECT_FALSE(unnamed.clear_error());
  EXPECT_TRUE(absl::StartsWith(unnamed.diagnosis(), "no survivor named the stopped rank: "))
      << unnamed.diagnosis();

  ChaosTrial itself = Stopped(1);  // the stopped rank's own words do not count
  JudgeTrial(absl::StrCat("[rank 1] ddpkit join: rank 1 did not arrive\n", kLauncherFailed),
             itself);
  EXPECT_FALSE(itself.clear_error());
}

// Rank 0 stopped before it served the rendezvous store (a loaded machine, a signal early in
// start-up): the survivors can only say the store did not answer and ask whether rank 0 runs.
TEST(ChaosJudgeTest, ARankZeroStoppedBeforeItsStoreIsNamedByTheStoreError) {
  const std::string store_error =
      "[rank 3] ddpkit join: store: could not connect to the rendezvous store at "
      "127.0.0.1:56801 within 3s (last error: Connection refused); is rank 0 running, and are "
      "MASTER_ADDR and MASTER_PORT right?\n";
  ChaosTrial zero = Stopped(0);
  JudgeTrial(store_error + kLauncherFailed, zero);
  EXPECT_TRUE(zero.clear_error()) << zero.diagnosis();
  EXPECT_TRUE(absl::StrContains(zero.diagnosis(), "is rank 0 running")) << zero.diagnosis();

  ChaosTrial two = Stopped(2);  // the store's error does not name any other rank
  JudgeTrial(store_error + kLauncherFailed, two);
  EXPECT_FALSE(two.clear_error());

  ChaosTrial silent = Stopped(0);  // stopped once the store served: its requests go unanswered
  JudgeTrial(absl::StrCat("[rank 2] ddpkit join: store: no reply before the deadline (store at "
                          "127.0.0.1:47143); rank 0, which hosts the store, did not answer (dead, "
                          "stuck, or not started)\n",
                          kLauncherFailed),
             silent);
  EXPECT_TRUE(silent.clear_error()) << silent.diagnosis();
}

TEST(ChaosJudgeTest, ACrashIsNeverClear) {
  ChaosTrial row = Stopped(1);
  row.set_signal("KILL");
  JudgeTrial(absl::StrCat("[rank 2] AddressSanitizer: heap-use-after-free\n", kLauncherFailed),
             row);
  EXPECT_FALSE(row.clear_error());
  EXPECT_TRUE(absl::StartsWith(row.diagnosis(), "a rank crashed: ")) << row.diagnosis();
}

}  // namespace
}  // namespace ddpkit::jobs
