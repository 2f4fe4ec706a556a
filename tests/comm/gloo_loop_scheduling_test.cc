// Gloo's event-loop thread runs under SCHED_BATCH (comm/gloo/loop_scheduling.h), and the thread
// that made the device keeps its own policy; so does a gloo group's communication thread once it
// runs a collective.
#include <sched.h>
#include <stdlib.h>

#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "comm/gloo/loop_scheduling.h"
#include "comm/gloo/process_group_gloo.h"
#include "comm/store/tcp_store.h"
#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

std::set<int> ThreadsOfThisProcess() {
  std::set<int> tids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    int tid = 0;
    if (absl::SimpleAtoi(entry.path().filename().string(), &tid)) tids.insert(tid);
  }
  return tids;
}

// The policies of the threads that creating a device started.
std::vector<int> PoliciesOfNewThreads(GlooLoopPolicy policy,
                                      std::shared_ptr<gloo::transport::Device>& device) {
  const std::set<int> before = ThreadsOfThisProcess();
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  device = CreateGlooDevice(attr, policy);
  std::vector<int> policies;
  for (int tid : ThreadsOfThisProcess()) {
    if (!before.contains(tid)) policies.push_back(sched_getscheduler(tid));
  }
  return policies;
}

TEST(GlooLoopSchedulingTest, TheLoopThreadRunsUnderBatchAndTheCallerKeepsItsPolicy) {
  std::shared_ptr<gloo::transport::Device> device;
  const std::vector<int> policies = PoliciesOfNewThreads(GlooLoopPolicy::kBatch, device);
  ASSERT_FALSE(policies.empty()) << "Gloo's device started no loop thread";
  for (int p : policies) EXPECT_EQ(p, SCHED_BATCH);
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
}

TEST(GlooLoopSchedulingTest, InheritLeavesTheLoopThreadAsGlooMakesIt) {
  std::shared_ptr<gloo::transport::Device> device;
  const std::vector<int> policies = PoliciesOfNewThreads(GlooLoopPolicy::kInherit, device);
  ASSERT_FALSE(policies.empty());
  for (int p : policies) EXPECT_EQ(p, SCHED_OTHER);
}

// The threads a one-rank gloo group started (Gloo's loop, the communication thread, the deadline
// watch) that run under SCHED_BATCH: after the group is made, and after its first collective.
std::pair<int, int> BatchThreadsOfAGroup() {
  const std::set<int> before = ThreadsOfThisProcess();
  auto server = TcpStoreServer::Start("127.0.0.1", 0);
  EXPECT_TRUE(server.ok()) << server.status();
  auto store = TcpStore::Connect("127.0.0.1", (*server)->port(), absl::Seconds(5));
  EXPECT_TRUE(store.ok()) << store.status();
  auto group = CreateGlooProcessGroup(0, 1, *std::move(store), "127.0.0.1", {});
  EXPECT_TRUE(group.ok()) << group.status();
  auto count = [&] {
    int batch = 0;
    for (int tid : ThreadsOfThisProcess()) {
      if (!before.contains(tid) && sched_getscheduler(tid) == SCHED_BATCH) ++batch;
    }
    return batch;
  };
  const int made = count();
  EXPECT_TRUE((*group)->Barrier()->Wait().ok());
  return {made, count()};
}

// The caller sleeps in Work::Wait while the communication thread runs the collective: the
// thread's wake-up must not preempt Gloo's loop (docs/performance.md "Allreduce").
TEST(GlooLoopSchedulingTest, TheCommunicationThreadRunsUnderBatchFromItsFirstCollective) {
  EXPECT_EQ(BatchThreadsOfAGroup(), std::make_pair(1, 2));  // the loop; then the comm thread
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
  setenv("DDPKIT_GLOO_LOOP", "inherit", 1);
  EXPECT_EQ(BatchThreadsOfAGroup(), std::make_pair(0, 0));
  unsetenv("DDPKIT_GLOO_LOOP");
}

TEST(GlooLoopSchedulingTest, AnUnknownPolicyIsRefusedNamingTheChoices) {
  setenv("DDPKIT_GLOO_LOOP", "fifo", 1);
  const absl::StatusOr<GlooLoopPolicy> policy = GlooLoopPolicyFromEnv();
  unsetenv("DDPKIT_GLOO_LOOP");
  ASSERT_FALSE(policy.ok());
  EXPECT_TRUE(absl::StrContains(policy.status().message(), "'fifo'")) << policy.status();
  EXPECT_TRUE(absl::StrContains(policy.status().message(), "batch (the default) or inherit"));
  EXPECT_EQ(*GlooLoopPolicyFromEnv(), GlooLoopPolicy::kBatch);
}

}  // namespace
}  // namespace ddpkit::comm
