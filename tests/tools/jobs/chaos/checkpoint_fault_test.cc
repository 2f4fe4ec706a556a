// The checks a link cut mid-checkpoint is judged by (`ddpkit chaos --fault-when checkpoint`).
#include "tools/jobs/chaos/checkpoint_fault.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace ddpkit::jobs {
namespace {

namespace fs = std::filesystem;

class CheckpointFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string dir() const { return dir_.string(); }
  void MakeFolder(const std::string& name, const std::string& manifest = "") {
    fs::create_directories(dir_ / name);
    if (!manifest.empty()) std::ofstream(dir_ / name / "MANIFEST.json") << manifest;
  }

 private:
  fs::path dir_;
};

TEST_F(CheckpointFaultTest, FindsTheCheckpointInFlightAndTheNewestCommittedStep) {
  EXPECT_EQ(NewestCommittedStep(dir()), -1);
  EXPECT_FALSE(WaitForCheckpointInFlight(dir(), absl::Now() + absl::Milliseconds(5)));
  MakeFolder("step-00000004");
  MakeFolder("step-00000005");
  MakeFolder(".tmp-step-00000006-42");
  EXPECT_EQ(NewestCommittedStep(dir()), 5);
  EXPECT_EQ(WaitForCheckpointInFlight(dir(), absl::Now() + absl::Seconds(1)),
            ".tmp-step-00000006-42");
}

TEST_F(CheckpointFaultTest, AHalfWrittenCheckpointIsNotAClearEnding) {
  MakeFolder("step-00000007", "{not a manifest");
  ChaosTrial row;
  row.set_clear_error(true);
  JudgeCheckpoints(dir(), {}, 6, row);
  EXPECT_FALSE(row.clear_error());
  EXPECT_TRUE(absl::StrContains(row.diagnosis(), "step-00000007")) << row.diagnosis();
}

TEST_F(CheckpointFaultTest, AResumeOlderThanWhatWasCommittedIsNotAClearEnding) {
  const std::vector<std::string> log = {
      "[rank 0] ddpkit train: resumed from step 3 (ckpt/step-00000003); running steps 4..9",
      "[rank 0] ddpkit train: resumed from step 8 (ckpt/step-00000008); running steps 9..9"};
  ChaosTrial row;
  row.set_clear_error(true);
  row.set_restarts(2);
  JudgeCheckpoints(dir(), log, 5, row);
  EXPECT_EQ(row.resumed_from_step(), 3);
  EXPECT_FALSE(row.clear_error());
  EXPECT_TRUE(absl::StrContains(row.diagnosis(), "resumed from step 3, older than step 5"))
      << row.diagnosis();

  ChaosTrial kept;
  kept.set_clear_error(true);
  kept.set_restarts(1);
  JudgeCheckpoints(dir(), {log[1]}, 5, kept);
  EXPECT_TRUE(kept.clear_error()) << kept.diagnosis();
}

}  // namespace
}  // namespace ddpkit::jobs
