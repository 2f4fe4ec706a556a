// Round-robin process groups: collective i runs on group i mod K, every result is right, the
// composite keeps one numbering over all of them, and bad group counts are refused.
#include "comm/round_robin.h"

#include "absl/strings/match.h"
#include "comm/threads/threads_world.h"
#include "comm/world/world.h"
#include "gtest/gtest.h"
#include "tests/comm/collective_checks.h"

namespace ddpkit::comm {
namespace {

class RoundRobinTest : public testing::TestWithParam<int> {};

// Collective i carries i + 1 elements, so each group's recorder shows which ones it ran.
TEST_P(RoundRobinTest, SuccessiveCollectivesAlternateBetweenTheGroups) {
  const int k = GetParam();
  constexpr int kCollectives = 7;
  ASSERT_TRUE(RunThreadsWorld(
                  2,
                  [&](ProcessGroup& group) -> absl::Status {
                    auto* rr = dynamic_cast<ProcessGroupRoundRobin*>(&group);
                    EXPECT_NE(rr, nullptr);
                    if (rr == nullptr) return absl::OkStatus();
                    EXPECT_EQ(rr->backend_name(), StrCat("round_robin(threads x", k, ")"));
                    EXPECT_EQ(rr->num_groups(), k);
                    std::vector<std::shared_ptr<Work>> works;
                    for (int i = 0; i < kCollectives; ++i) {
                      works.push_back(group.Allreduce(Tensor::Full({i + 1}, 1.0)));
                    }
                    for (int i = 0; i < kCollectives; ++i) {
                      DDPKIT_RETURN_IF_ERROR(works[i]->Wait());
                      EXPECT_EQ(works[i]->sequence_number(), static_cast<uint64_t>(i + 1));
                    }
                    for (int g = 0; g < k; ++g) {
                      std::vector<int64_t> counts;
                      for (const auto& e : rr->group(g).flight_recorder().Entries()) {
                        counts.push_back(e.count);
                      }
                      std::vector<int64_t> expected;
                      for (int i = g; i < kCollectives; i += k) expected.push_back(i + 1);
                      EXPECT_EQ(counts, expected) << "group " << g;
                    }
                    // The composite's own recorder: every collective, under its own numbers.
                    const auto entries = group.flight_recorder().Entries();
                    EXPECT_EQ(entries.size(), static_cast<size_t>(kCollectives));
                    for (size_t i = 0; i < entries.size(); ++i) {
                      EXPECT_EQ(entries[i].sequence_number, i + 1);
                      EXPECT_EQ(entries[i].count, static_cast<int64_t>(i + 1));
                      EXPECT_EQ(entries[i].state, FlightRecorder::State::kCompleted);
                    }
                    return absl::OkStatus();
                  },
                  {}, k)
                  .ok());
}

INSTANTIATE_TEST_SUITE_P(Groups, RoundRobinTest, testing::Values(2, 3));

struct Case {
  int groups;
  DType dtype;
  int world;
};

class RoundRobinCollectivesTest : public testing::TestWithParam<Case> {};

TEST_P(RoundRobinCollectivesTest, EveryCollectiveMatchesTheLocalReference) {
  const Case& c = GetParam();
  for (int64_t count : {0, 1, 7, 1001}) {
    absl::Status status = RunThreadsWorld(
        c.world,
        [&](ProcessGroup& group) {
          return testing_util::CheckAllCollectives(group, c.dtype, count);
        },
        {}, c.groups);
    EXPECT_TRUE(status.ok()) << count << " elements: " << status;
  }
}

INSTANTIATE_TEST_SUITE_P(GroupsDtypesWorlds, RoundRobinCollectivesTest,
                         testing::Values(Case{1, DType::kFloat32, 3}, Case{2, DType::kFloat32, 3},
                                         Case{3, DType::kFloat32, 3}, Case{2, DType::kInt64, 2},
                                         Case{3, DType::kBFloat16, 4}),
                         [](const testing::TestParamInfo<Case>& info) {
                           return StrCat("k", info.param.groups, "_", DTypeName(info.param.dtype),
                                         "_world", info.param.world);
                         });

// Each collective queued, started and finished once, under the composite's numbers.
TEST(RoundRobinListenerTest, SeesTheCompositesNumbers) {
  struct Counter final : CollectiveListener {
    void OnQueued(const Collective& c) override { add(c.sequence_number, 'q'); }
    void OnStarted(uint64_t seq) override { add(seq, 's'); }
    void OnFinished(uint64_t seq, bool ok) override { add(seq, ok ? 'f' : 'x'); }
    void add(uint64_t seq, char what) {
      std::lock_guard<std::mutex> lock(mu);
      order[seq] += what;
    }
    std::mutex mu;
    std::map<uint64_t, std::string> order;
  };
  ASSERT_TRUE(RunThreadsWorld(
                  2,
                  [](ProcessGroup& group) -> absl::Status {
                    Counter counter;
                    group.SetListener(&counter);
                    DDPKIT_RETURN_IF_ERROR(group.Allreduce(Tensor::Full({3}, 1.0))->Wait());
                    DDPKIT_RETURN_IF_ERROR(group.Barrier()->Wait());
                    DDPKIT_RETURN_IF_ERROR(group.Broadcast(Tensor::Full({2}, 1.0), 1)->Wait());
                    group.SetListener(nullptr);
                    std::lock_guard<std::mutex> lock(counter.mu);
                    EXPECT_EQ(counter.order, (std::map<uint64_t, std::string>{
                                                 {1, "qsf"}, {2, "qsf"}, {3, "qsf"}}));
                    return absl::OkStatus();
                  },
                  {}, 2)
                  .ok());
}

// A failure breaks the group it ran on; the composite's health is the first broken group's.
TEST(RoundRobinHealthTest, IsTheFirstUnhealthyGroups) {
  std::vector<std::shared_ptr<ThreadsWorld>> worlds = {std::make_shared<ThreadsWorld>(2),
                                                       std::make_shared<ThreadsWorld>(2)};
  worlds[0]->Depart(1);
  std::vector<std::unique_ptr<ProcessGroup>> groups;
  for (const auto& w : worlds) groups.push_back(std::make_unique<ProcessGroupThreads>(w, 0));
  ProcessGroupRoundRobin rr(std::move(groups));
  EXPECT_TRUE(rr.health().ok());
  absl::Status first = rr.Barrier()->Wait();  // group 0: rank 1 has left
  EXPECT_FALSE(first.ok());
  EXPECT_EQ(rr.health(), rr.group(0).health());
  EXPECT_TRUE(rr.group(1).health().ok());
  const auto entries = rr.flight_recorder().Entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].state, FlightRecorder::State::kFailed);
}

TEST(RoundRobinErrorsTest, BadGroupCountsAreRefusedNamingTheFlag) {
  for (int k : {0, -1, kMaxRoundRobinGroups + 1}) {
    WorldSpec spec{.world_size = 2};
    spec.round_robin_groups = k;
    absl::Status status = ValidateWorldSpec(spec);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << k;
    EXPECT_TRUE(absl::StrContains(status.message(), "--round-robin-groups must be in [1, 16]"))
        << status;
  }
  WorldSpec gloo{.backend = Backend::kGloo};
  gloo.round_robin_groups = kMaxRoundRobinGroups;
  EXPECT_TRUE(ValidateWorldSpec(gloo).ok());
  if (kWithCuda) {
    WorldSpec nccl{.backend = Backend::kNccl};
    nccl.round_robin_groups = 2;
    EXPECT_TRUE(absl::StrContains(ValidateWorldSpec(nccl).message(), "--backend nccl"));
  }
}

TEST(RoundRobinErrorsTest, GroupsMustSpanTheSameRanks) {
  EXPECT_THROW(ProcessGroupRoundRobin({}), Error);
  auto world = std::make_shared<ThreadsWorld>(2);
  std::vector<std::unique_ptr<ProcessGroup>> groups;
  groups.push_back(std::make_unique<ProcessGroupThreads>(world, 0));
  groups.push_back(std::make_unique<ProcessGroupThreads>(std::make_shared<ThreadsWorld>(2), 1));
  try {
    ProcessGroupRoundRobin rr(std::move(groups));
    ADD_FAILURE() << "groups of ranks 0 and 1 were accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "every group must span the same ranks")) << e.what();
  }
}

}  // namespace
}  // namespace ddpkit::comm
