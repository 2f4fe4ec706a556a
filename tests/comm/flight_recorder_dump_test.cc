// Flight-recorder dumps: PyTorch's field names, and every rank's dump after a failure — the
// ranks that failed in a collective, and the ones that had already finished.
#include "comm/flight_recorder_dump.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "comm/threads/threads_world.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ddpkit::comm {
namespace {

std::string TempDir(const std::string& name) {
  const std::string dir =
      testing::TempDir() + "/ddpkit_fr_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

TEST(FlightRecorderDumpTest, EntriesUsePyTorchsFieldNames) {
  const std::string dir = TempDir("fields");
  ASSERT_TRUE(RunThreadsWorld(2, [&](ProcessGroup& group) -> absl::Status {
                {
                  ScopedCollectiveTag tag({.purpose = "bucket", .bucket = 3});
                  DDPKIT_RETURN_IF_ERROR(group.Allreduce(Tensor::Full({5}, 1.0))->Wait());
                }
                if (group.rank() != 0) return absl::OkStatus();
                absl::StatusOr<std::string> path =
                    WriteFlightRecorderDump(dir, group.flight_recorder().Entries(),
                                            {.rank = 0,
                                             .world_size = 2,
                                             .backend = "threads",
                                             .reason = "a test",
                                             .timeout = absl::Seconds(7)});
                EXPECT_TRUE(path.ok()) << path.status();
                return absl::OkStatus();
              }).ok());
  const nlohmann::json dump = ReadJson(FlightRecorderDumpPath(dir, 0));
  EXPECT_EQ(dump["version"], kFlightRecorderDumpVersion);
  EXPECT_EQ(dump["rank"], 0);
  EXPECT_EQ(dump["world_size"], 2);
  EXPECT_EQ(dump["reason"], "a test");
  ASSERT_EQ(dump["entries"].size(), 1u);
  const nlohmann::json& e = dump["entries"][0];
  EXPECT_EQ(e["record_id"], 0);
  EXPECT_EQ(e["collective_seq_id"], 1);
  EXPECT_EQ(e["profiling_name"], "threads:all_reduce");
  EXPECT_EQ(e["input_sizes"], nlohmann::json::parse("[[5]]"));
  EXPECT_EQ(e["input_dtypes"], nlohmann::json::parse(R"(["Float"])"));
  EXPECT_EQ(e["state"], "completed");
  EXPECT_EQ(e["retired"], true);
  EXPECT_EQ(e["timeout_ms"], 7000.0);
  EXPECT_EQ(e["purpose"], "bucket");
  EXPECT_EQ(e["bucket"], 3);
  EXPECT_TRUE(e["time_created_ns"].is_number());
  EXPECT_TRUE(e["time_discovered_completed_ns"].is_number());
  EXPECT_TRUE(e["duration_ms"].is_number());
  std::filesystem::remove_all(dir);
}

// Rank 2 finishes after one allreduce; ranks 0 and 1 issue a second one, which cannot complete.
// The two that failed dump from their communication threads, and rank 2's recorder — taken when
// it finished — is dumped too, so an analysis sees what it last issued.
TEST(FlightRecorderDumpTest, EveryRankDumpsWhenOneCollectiveFails) {
  const std::string dir = TempDir("failure");
  ProcessGroupOptions options;
  options.timeout = absl::Seconds(20);
  options.fr_dump_dir = dir;
  const absl::Status status = RunThreadsWorld(
      3,
      [](ProcessGroup& group) -> absl::Status {
        DDPKIT_RETURN_IF_ERROR(group.Allreduce(Tensor::Full({2}, 1.0))->Wait());
        if (group.rank() == 2) return absl::OkStatus();
        return group.Allreduce(Tensor::Full({2}, 1.0))->Wait();
      },
      options);
  ASSERT_FALSE(status.ok());
  for (int r = 0; r < 3; ++r) {
    const nlohmann::json dump = ReadJson(FlightRecorderDumpPath(dir, r));
    EXPECT_EQ(dump["rank"], r);
    EXPECT_EQ(dump["entries"].size(), r == 2 ? 1u : 2u) << "rank " << r;
    const std::string reason = dump["reason"];
    if (r == 2) {
      EXPECT_TRUE(absl::StrContains(reason, "rank 2 finished its work without an error")) << reason;
    } else {
      EXPECT_TRUE(absl::StrContains(reason, "rank 2 has finished without issuing it")) << reason;
      EXPECT_EQ(dump["entries"][1]["state"], "failed");
    }
  }
  std::filesystem::remove_all(dir);
}

// A rank that leaves a collective queued and returns: the collective fails while its group
// drains, and the dump it writes then (with the failure) is the one that stays.
TEST(FlightRecorderDumpTest, ACollectiveThatFailsWhileTheGroupDrainsKeepsItsDump) {
  const std::string dir = TempDir("drain");
  ProcessGroupOptions options;
  options.timeout = absl::Seconds(20);
  options.fr_dump_dir = dir;
  const absl::Status status = RunThreadsWorld(
      2,
      [](ProcessGroup& group) -> absl::Status {
        if (group.rank() == 0) {
          group.Allreduce(Tensor::Full({2}, 1.0));  // not waited for
          return absl::OkStatus();
        }
        absl::SleepFor(absl::Milliseconds(100));  // rank 0 is draining by now
        return absl::InternalError("rank 1 gives up");
      },
      options);
  ASSERT_FALSE(status.ok());
  const nlohmann::json dump = ReadJson(FlightRecorderDumpPath(dir, 0));
  ASSERT_EQ(dump["entries"].size(), 1u);
  EXPECT_EQ(dump["entries"][0]["state"], "failed");
  EXPECT_FALSE(absl::StrContains(std::string(dump["reason"]), "without an error"))
      << dump["reason"];
  std::filesystem::remove_all(dir);
}

TEST(FlightRecorderDumpTest, NoDumpWithoutADumpDirectory) {
  ProcessGroupOptions options;
  options.fr_dump_dir = "";
  const absl::Status status = RunThreadsWorld(
      2,
      [](ProcessGroup& group) -> absl::Status {
        if (group.rank() == 1) return absl::OkStatus();
        absl::Status s = group.Allreduce(Tensor::Full({2}, 1.0))->Wait();
        EXPECT_EQ(group.flight_recorder_dump_path(), "");
        return s;
      },
      options);
  EXPECT_FALSE(status.ok());
}

}  // namespace
}  // namespace ddpkit::comm
