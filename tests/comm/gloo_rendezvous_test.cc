// The Gloo rendezvous when a rank never comes or cannot be reached (its own binary, labelled gloo:
// Debian's libgloo is not built for ThreadSanitizer).
#include <signal.h>

#include <functional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "comm/gloo/process_group_gloo.h"
#include "comm/store/tcp_store.h"
#include "comm/world/rendezvous.h"
#include "comm/world/world.h"
#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

// A rank that never comes: rank 0's rendezvous fails within its timeout and names it.
TEST(GlooRendezvousTest, ARankThatNeverArrivesIsNamed) {
  auto port = TcpStoreServer::Start("127.0.0.1", 0);  // find a free port, then free it
  ASSERT_TRUE(port.ok());
  const int free_port = (*port)->port();
  port->reset();
  const EnvRendezvous env{.master_addr = "127.0.0.1", .master_port = free_port, .world_size = 3};
  const absl::Time start = absl::Now();
  auto world = DistributedWorld::InitGloo(env, {.timeout = absl::Seconds(1)});
  ASSERT_FALSE(world.ok());
  EXPECT_TRUE(
      absl::StrContains(world.status().message(), "ranks 1, 2 did not arrive at the rendezvous"))
      << world.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1) + CompletionBound({.timeout = absl::Seconds(1)}));
}

// A store that forwards everything, except that `before_wait` runs ahead of every wait and
// decides it: a rank's view of the job's store in which its peer's progress can be staged.
class StagedStore final : public Store {
 public:
  StagedStore(std::shared_ptr<Store> store, std::function<absl::Status()> before_wait)
      : store_(std::move(store)), before_wait_(std::move(before_wait)) {}
  absl::Status Set(const std::string& key, const std::string& value,
                   absl::Duration reply_timeout) override {
    return store_->Set(key, value, reply_timeout);
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    return store_->Get(key, timeout);
  }
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta,
                              absl::Duration reply_timeout) override {
    return store_->Add(key, delta, reply_timeout);
  }
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override {
    DDPKIT_RETURN_IF_ERROR(before_wait_());
    return store_->Wait(keys, timeout);
  }
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys,
                             absl::Duration reply_timeout) override {
    return store_->Check(keys, reply_timeout);
  }

 private:
  std::shared_ptr<Store> store_;
  std::function<absl::Status()> before_wait_;
};

// Gloo's connect error names the peer only by its address; the error names the rank behind it.
// Rank 1 publishes its Gloo addresses, then gives up and closes the sockets behind them (as a
// rank whose host went away right after publishing); only then does rank 0 connect to them.
TEST(GlooRendezvousTest, APeerUnreachableInGloosConnectIsNamedByRank) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  auto connect = [&]() -> std::shared_ptr<Store> {
    return *TcpStore::Connect("127.0.0.1", (*server)->port(), absl::Seconds(5));
  };
  const ProcessGroupOptions options{.timeout = absl::Milliseconds(200)};
  absl::Notification rank1_gone;
  std::thread rank1([&] {
    auto gone = CreateGlooProcessGroup(
        1, 2,
        std::make_shared<StagedStore>(connect(), [] { return absl::UnavailableError("gone"); }),
        "127.0.0.1", options);
    EXPECT_FALSE(gone.ok());
    rank1_gone.Notify();
  });
  const absl::Time start = absl::Now();
  auto group =
      CreateGlooProcessGroup(0, 2,
                             std::make_shared<StagedStore>(connect(),
                                                           [&] {
                                                             rank1_gone.WaitForNotification();
                                                             return absl::OkStatus();
                                                           }),
                             "127.0.0.1", options);
  rank1.join();
  ASSERT_FALSE(group.ok());
  EXPECT_TRUE(absl::StrContains(group.status().message(),
                                "rank 0 could not reach rank 1 (host 127.0.0.1, port "))
      << group.status();
  // The side of a pair that waits for its peer to connect waits 5 timeouts (Gloo's own choice).
  EXPECT_LT(absl::Now() - start, 5 * options.timeout + absl::Seconds(1));
}

// The env:// variables of a world of one gloo rank on a free local port (ctest runs each test
// in a process of its own, so the environment is this test's).
void SetOneRankEnvWorld() {
  auto port = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  const std::string free_port = std::to_string((*port)->port());
  port->reset();
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", free_port.c_str(), 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("RANK", "0", 1);
}

// A rank's body that throws (DDP's backward does when a collective fails) ends RunOnWorld with
// that error as a Status, as a returned one would, instead of terminating the process before
// the rank checks out of its world.
TEST(GlooRendezvousTest, AThrownErrorIsReturnedLikeAReturnedOne) {
  ASSERT_NO_FATAL_FAILURE(SetOneRankEnvWorld());
  const absl::Status status = RunOnWorld({.backend = Backend::kGloo}, [](ProcessGroup&) {
    throw Error("the body failed", absl::StatusCode::kUnavailable);
    return absl::OkStatus();
  });
  EXPECT_EQ(status, absl::UnavailableError("the body failed"));
}

// A gloo group ignores SIGPIPE (unless the program handles it): Gloo writes to a peer that has
// just died would otherwise end this process by the signal, before the failed collective names
// the dead rank (a fresh-clone run of GlooFaultTest saw rank 0 killed so).
TEST(GlooRendezvousTest, AGlooGroupLeavesSigpipeIgnored) {
  ASSERT_EQ(::signal(SIGPIPE, SIG_DFL), SIG_DFL);  // as a C++ program starts
  ASSERT_NO_FATAL_FAILURE(SetOneRankEnvWorld());
  ASSERT_TRUE(
      RunOnWorld({.backend = Backend::kGloo}, [](ProcessGroup&) { return absl::OkStatus(); }).ok());
  EXPECT_EQ(::signal(SIGPIPE, SIG_DFL), SIG_IGN);
}

}  // namespace
}  // namespace ddpkit::comm
