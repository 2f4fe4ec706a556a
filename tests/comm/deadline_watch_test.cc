// WatchDeadlines: a backend whose call outlives the timeout (Gloo bounds each wait, not the call)
// has its collective failed at the timeout, naming it, and the group broken; a call that ends in
// time is left alone.
#include <thread>

#include "absl/strings/match.h"
#include "comm/process_group.h"
#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

// A backend whose every call takes `hold` and then succeeds, as a crawling link would.
class SlowGroup final : public ProcessGroup {
 public:
  SlowGroup(absl::Duration timeout, absl::Duration hold)
      : ProcessGroup(0, 2, ProcessGroupOptions{.timeout = timeout}), hold_(hold) {
    WatchDeadlines();
    StartCommThread();
  }
  ~SlowGroup() override { StopCommThread(); }
  std::string_view backend_name() const override { return "slow"; }

 private:
  absl::Status Execute(const Collective&) override {
    absl::SleepFor(hold_);
    return absl::OkStatus();
  }
  absl::Status VerifyCallsMatch(const Collective&) override { return absl::OkStatus(); }
  const absl::Duration hold_;
};

TEST(DeadlineWatchTest, ACallPastTheTimeoutFailsAtTheTimeoutNamingTheCollective) {
  SlowGroup group(absl::Milliseconds(100), absl::Milliseconds(700));
  const absl::Time start = absl::Now();
  const absl::Status status = group.Allreduce(Tensor::Full({4}, 1.0))->Wait();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "ALLREDUCE (sequence number 1")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "did not complete within its timeout of 100ms"))
      << status;
  const absl::Status next = group.Barrier()->Wait();
  EXPECT_TRUE(absl::StrContains(next.message(), "unusable after an earlier failure")) << next;
}

TEST(DeadlineWatchTest, ACallInsideTheTimeoutIsLeftAlone) {
  SlowGroup group(absl::Milliseconds(500), absl::Milliseconds(20));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(group.Allreduce(Tensor::Full({4}, 1.0))->Wait().ok());
  EXPECT_TRUE(group.health().ok());
}

}  // namespace
}  // namespace ddpkit::comm
