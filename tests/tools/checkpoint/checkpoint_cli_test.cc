// `ddpkit train --checkpoint-*` as a user runs it: the flags in --help, one-line errors naming
// the flag, the resume line, and the JSON report's resume step and checkpoint folders.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "autograd/nn/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/run_command.h"

namespace {

using Result = ddpkit::testing_util::CommandResult;

Result RunDdpkit(const std::string& args) {
  return ddpkit::testing_util::RunCommand(DDPKIT_BINARY_DIR "/bin/ddpkit " + args);
}

std::string FreshDir(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "/ddpkit_ckpt_cli_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(CheckpointCliTest, HelpDocumentsTheFlags) {
  Result r = RunDdpkit("train --help");
  ASSERT_EQ(r.status, 0);
  for (const char* flag : {"--checkpoint-dir", "--checkpoint-every", "--checkpoint-keep"}) {
    EXPECT_TRUE(absl::StrContains(r.out, flag)) << flag << "\n" << r.out;
  }
}

TEST(CheckpointCliTest, BadValuesAreOneLineNamingTheFlag) {
  const std::string dir = FreshDir("bad");
  const std::pair<std::string, std::string> cases[] = {
      {"--checkpoint-dir " + dir + " --checkpoint-every 0",
       "--checkpoint-every must be >= 1, got 0"},
      {"--checkpoint-dir " + dir + " --checkpoint-keep 0", "--checkpoint-keep must be >= 1, got 0"},
      {"--checkpoint-every 5", "--checkpoint-every and --checkpoint-keep need --checkpoint-dir"},
      {"--checkpoint-dir /proc/ddpkit_cli/x", "--checkpoint-dir '/proc/ddpkit_cli/x' is not a"},
  };
  for (const auto& [args, expected] : cases) {
    Result r = RunDdpkit("train --steps 1 " + args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.err;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, expected)) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  std::filesystem::remove_all(dir);
}

TEST(CheckpointCliTest, JsonReportsTheResumeAndTheCheckpointsWritten) {
  const std::string dir = FreshDir("json");
  const std::string train =
      "train --world-size 2 --model mlp:8,16,4 --batch-size 8 "
      "--checkpoint-every 2 --checkpoint-dir " +
      dir + " --json --steps ";
  Result first = RunDdpkit(train + "3");
  ASSERT_EQ(first.status, 0) << first.err;
  const nlohmann::json a = nlohmann::json::parse(first.out);
  EXPECT_EQ(a["resumed_from_step"], 0);
  EXPECT_EQ(a["checkpoints_written"],
            nlohmann::json({dir + "/step-00000002", dir + "/step-00000003"}));

  Result second = RunDdpkit(train + "5");
  ASSERT_EQ(second.status, 0) << second.err;
  const nlohmann::json b = nlohmann::json::parse(second.out);  // stdout: only the report
  EXPECT_EQ(b["resumed_from_step"], 3);
  EXPECT_EQ(b["resumed_from"], dir + "/step-00000003");
  EXPECT_EQ(b["losses"].size(), 2u);
  EXPECT_EQ(b["checkpoints_written"],
            nlohmann::json({dir + "/step-00000004", dir + "/step-00000005"}));
  EXPECT_TRUE(absl::StrContains(second.err, "ddpkit train: resumed from step 3 (" + dir +
                                                "/step-00000003); running steps 4..5"))
      << second.err;

  // The story: the resume line on stdout, a summary line naming the last checkpoint.
  Result third = RunDdpkit(
      "train --world-size 2 --model mlp:8,16,4 --batch-size 8 "
      "--checkpoint-dir " +
      dir + " --steps 6");
  ASSERT_EQ(third.status, 0) << third.err;
  EXPECT_TRUE(absl::StrContains(third.out, "resumed from step 5")) << third.out;
  EXPECT_TRUE(
      absl::StrContains(third.out, "checkpoints: 1 written, the last " + dir + "/step-00000006"))
      << third.out;
  std::filesystem::remove_all(dir);
}

// A real crash: SIGKILL at arbitrary moments (mid-step, mid-write, mid-commit), three times in
// a row, then a run to the end — the weights are bitwise those of a run never interrupted.
TEST(CheckpointCliTest, KilledAtArbitraryMomentsAndRerunEndsBitwiseEqual) {
  const std::string dir = FreshDir("killed");
  const std::string straight = dir + "_straight.safetensors",
                    resumed = dir + "_resumed.safetensors";
  const std::string train =
      "train --world-size 2 --model mlp:8,16,16,4 --batch-size 8 "
      "--momentum 0.9 --optimizer zero-sgd --steps 150 --json ";
  ASSERT_EQ(RunDdpkit(train + "--save-weights " + straight).status, 0);
  int kills = 0;
  for (const char* delay : {"0.12", "0.2", "0.3"}) {
    Result r = ddpkit::testing_util::RunCommand("timeout -s KILL " + std::string(delay) + " " +
                                                DDPKIT_BINARY_DIR "/bin/ddpkit " + train +
                                                "--checkpoint-every 1 --checkpoint-dir " + dir);
    kills += r.status != 0;
  }
  Result last = RunDdpkit(train + "--checkpoint-every 1 --checkpoint-dir " + dir +
                          " --save-weights " + resumed);
  ASSERT_EQ(last.status, 0) << last.err;
  EXPECT_GT(kills, 0) << "no run was killed: make the job longer";
  absl::StatusOr<ddpkit::SafetensorsFile> a = ddpkit::ReadSafetensors(straight),
                                          b = ddpkit::ReadSafetensors(resumed);
  ASSERT_TRUE(a.ok() && b.ok());
  for (const auto& [name, tensor] : a->tensors) {
    const ddpkit::Tensor* other = b->Find(name);
    ASSERT_NE(other, nullptr) << name;
    EXPECT_EQ(std::memcmp(tensor.raw_data(), other->raw_data(), tensor.nbytes()), 0) << name;
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    EXPECT_FALSE(absl::StartsWith(entry.path().filename().string(), ".tmp-")) << entry.path();
  }
  std::filesystem::remove_all(dir);
  std::filesystem::remove(straight);
  std::filesystem::remove(resumed);
}

}  // namespace
