// The contract of comm/process_group.h on the threads backend, and the Backend table. The same
// CheckBackendContract runs on gloo (gloo_launch_test), mpi (mpi_launch_test) and nccl
// (nccl_test).
#include "absl/strings/match.h"
#include "comm/backend.h"
#include "comm/threads/threads_world.h"
#include "gtest/gtest.h"
#include "tests/comm/collective_checks.h"

namespace ddpkit::comm {
namespace {

TEST(BackendContractTest, ThreadsKeepsTheContract) {
  for (int world : {1, 2}) {
    absl::Status status = RunThreadsWorld(world, [](ProcessGroup& group) {
      return testing_util::CheckBackendContract(group, Device::Cpu());
    });
    EXPECT_TRUE(status.ok()) << status;
  }
}

TEST(BackendTableTest, EveryNameParsesBackToItsBackend) {
  for (const BackendInfo& info : kBackends) {
    absl::StatusOr<Backend> parsed = ParseBackend(info.name);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, info.backend);
    EXPECT_EQ(BackendName(info.backend), info.name);
  }
  absl::Status bad = ParseBackend("ucc").status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad));
  EXPECT_TRUE(absl::StrContains(bad.message(), "--backend must be threads, gloo, mpi or nccl"));
  EXPECT_TRUE(absl::StrContains(BackendHelp(), "mpi (CPU tensors"));
}

}  // namespace
}  // namespace ddpkit::comm
