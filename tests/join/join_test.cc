// The Join framework on its own, with a toy Joinable: the hooks each rank runs, how often, and
// what the active ranks' collectives see while joined ranks shadow them.
#include "join/join.h"

#include <vector>

#include "comm/threads/threads_world.h"
#include "gtest/gtest.h"

namespace ddpkit::join {
namespace {

using comm::ProcessGroup;
using comm::RunThreadsWorld;

// A toy joinable. Each iteration an active rank allreduces a 1 (its "gradient"); a joined
// rank's hook allreduces a 0 in its place. It counts what its hook was asked to do.
class Counter final : public Joinable {
 public:
  explicit Counter(ProcessGroup& group) : group_(group) {}

  // One iteration of an active rank: tell Join first, then the collective every rank matches.
  void Step() {
    Tensor active;
    std::shared_ptr<comm::Work> count = Join::NotifyJoinContext(*this, &active);
    sums.push_back(Allreduce(1));
    if (count != nullptr) {
      EXPECT_TRUE(count->Wait().ok());
      active_counts.push_back(active.data<int64_t>()[0]);
    }
  }

  std::unique_ptr<JoinHook> MakeJoinHook() override {
    struct Hook final : JoinHook {
      explicit Hook(Counter& c) : counter(c) {}
      void MainHook() override {
        ++counter.main_hooks;
        counter.Allreduce(0);
      }
      void PostHook(bool is_last_joiner) override {
        ++counter.post_hooks;
        counter.last_joiner = is_last_joiner;
      }
      Counter& counter;
    };
    return std::make_unique<Hook>(*this);
  }
  ProcessGroup& join_process_group() const override { return group_; }

  int main_hooks = 0, post_hooks = 0;
  bool last_joiner = false;
  std::vector<int64_t> sums;           // each of this rank's iterations: ranks that added a 1
  std::vector<int64_t> active_counts;  // Join's count of active ranks, same iterations

 private:
  int64_t Allreduce(int64_t value) {
    Tensor t = Tensor::Full({1}, static_cast<double>(value), DType::kInt64);
    EXPECT_TRUE(group_.Allreduce(t)->Wait().ok());
    return t.data<int64_t>()[0];
  }
  ProcessGroup& group_;
};

// What each rank's counter saw, after a run with `inputs[r]` iterations on rank r.
struct Seen {
  int main_hooks = 0, post_hooks = 0;
  bool last_joiner = false;
  std::vector<int64_t> sums, active_counts;
  bool threw_aborted = false;
};

std::vector<Seen> RunCounters(const std::vector<int>& inputs, JoinOptions options) {
  std::vector<Seen> seen(inputs.size());
  const absl::Status status =
      RunThreadsWorld(static_cast<int>(inputs.size()), [&](ProcessGroup& group) {
        Counter counter(group);
        Seen& mine = seen[group.rank()];
        try {
          Join::Run({&counter}, options, [&] {
            for (int i = 0; i < inputs[group.rank()]; ++i) counter.Step();
          });
        } catch (const Error& e) {
          mine.threw_aborted = e.code() == absl::StatusCode::kAborted;
        }
        mine.main_hooks = counter.main_hooks;
        mine.post_hooks = counter.post_hooks;
        mine.last_joiner = counter.last_joiner;
        mine.sums = counter.sums;
        mine.active_counts = counter.active_counts;
        return absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
  return seen;
}

TEST(JoinTest, JoinedRanksShadowEveryRemainingIterationThenAllPostHooksRun) {
  const std::vector<Seen> seen = RunCounters({3, 1, 2}, {});
  const std::vector<int> shadowed = {0, 2, 1};  // the most inputs (3) minus each rank's own
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(seen[r].main_hooks, shadowed[r]) << "rank " << r;
    EXPECT_EQ(seen[r].post_hooks, 1) << "rank " << r;
    EXPECT_EQ(seen[r].last_joiner, r == 0) << "rank " << r;
  }
  // Rank 0 ran all three iterations: 3, then 2, then 1 rank added a 1; joined ranks added 0s.
  EXPECT_EQ(seen[0].sums, (std::vector<int64_t>{3, 2, 1}));
  EXPECT_EQ(seen[0].active_counts, (std::vector<int64_t>{3, 2, 1}));
  EXPECT_EQ(seen[2].sums, (std::vector<int64_t>{3, 2}));
}

TEST(JoinTest, EveryRankWithTheMostInputsIsALastJoiner) {
  const std::vector<Seen> seen = RunCounters({2, 2, 1}, {});
  EXPECT_TRUE(seen[0].last_joiner);
  EXPECT_TRUE(seen[1].last_joiner);
  EXPECT_FALSE(seen[2].last_joiner);
  EXPECT_EQ(seen[2].main_hooks, 1);
}

TEST(JoinTest, RanksWithoutInputsOnlyRunThePostHooks) {
  for (const Seen& s : RunCounters({0, 0}, {})) {
    EXPECT_EQ(s.main_hooks, 0);
    EXPECT_EQ(s.post_hooks, 1);
    EXPECT_TRUE(s.last_joiner);
  }
}

TEST(JoinTest, ThrowModeStopsEveryRankInTheIterationTheFirstRanOutAt) {
  const std::vector<Seen> seen = RunCounters({3, 1, 2}, {.throw_on_early_termination = true});
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(seen[r].threw_aborted) << "rank " << r;
    EXPECT_EQ(seen[r].sums.size(), 1u) << "rank " << r;  // iteration 0 only
    EXPECT_EQ(seen[r].main_hooks, 0) << "rank " << r;
    EXPECT_EQ(seen[r].post_hooks, 0) << "rank " << r;
  }
}

TEST(JoinTest, DisabledJoinOnlyRunsTheLoop) {
  for (const Seen& s : RunCounters({2, 2}, {.enable = false})) {
    EXPECT_EQ(s.sums, (std::vector<int64_t>{2, 2}));
    EXPECT_TRUE(s.active_counts.empty());  // no count allreduce
    EXPECT_EQ(s.main_hooks + s.post_hooks, 0);
  }
}

TEST(JoinTest, MisuseIsDiagnosed) {
  ASSERT_TRUE(RunThreadsWorld(1, [](ProcessGroup& group) {
                EXPECT_THROW(Join::Run({}, {}, [] {}), Error);
                comm::ProcessGroupThreads other(std::make_shared<comm::ThreadsWorld>(1), 0);
                Counter a(group), b(other);
                try {
                  Join::Run({&a, &b}, {}, [] {});
                  ADD_FAILURE() << "joinables on two process groups were accepted";
                } catch (const Error& e) {
                  EXPECT_NE(std::string(e.what()).find("one process group"), std::string::npos)
                      << e.what();
                }
                return absl::OkStatus();
              }).ok());
}

}  // namespace
}  // namespace ddpkit::join
