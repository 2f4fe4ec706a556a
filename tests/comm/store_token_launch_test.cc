// A guarded store in a real job: `ddpkit launch` hands its ranks a token, and a stranger that
// connects to MASTER_PORT while the job trains is turned away without disturbing it.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "absl/strings/match.h"
#include "comm/store/tcp_store.h"
#include "comm/store/token.h"
#include "gtest/gtest.h"
#include "tests/run_command.h"

namespace ddpkit::comm {
namespace {

TEST(StoreTokenLaunchTest, AStrangerIsRejectedWhileTheJobTrainsOn) {
  ::unsetenv(kStoreTokenEnv);  // the launcher draws one
  const int port = testing_util::FreeLocalPort();
  testing_util::CommandResult job;
  std::atomic<bool> finished = false;
  std::thread launcher([&] {
    job = testing_util::RunCommandMerged(
        DDPKIT_BINARY_DIR
        "/bin/ddpkit launch --teardown-grace 8 --nproc-per-node 2 "
        "--master-addr 127.0.0.1 --master-port " +
        std::to_string(port) +
        " -- " DDPKIT_BINARY_DIR
        "/bin/ddpkit train --backend gloo --steps 1000 --batch-size 8 --model mlp:32,64,64,10");
    finished = true;
  });
  // Retries until rank 0 serves the store, then is turned away at once.
  absl::StatusOr<std::unique_ptr<TcpStore>> missing =
      TcpStore::Connect("127.0.0.1", port, absl::Seconds(60));
  // Then knocks again, with a wrong token, every 20 ms while the job runs.
  int rejected = missing.status().code() == absl::StatusCode::kPermissionDenied ? 1 : 0;
  while (!finished) {
    absl::StatusOr<std::unique_ptr<TcpStore>> wrong =
        TcpStore::Connect("127.0.0.1", port, absl::Milliseconds(100), std::string(64, '0'));
    if (wrong.ok()) {  // no ASSERT: the launcher thread must still be joined
      ADD_FAILURE() << "a stranger with a wrong token was admitted";
      break;
    }
    if (wrong.status().code() == absl::StatusCode::kPermissionDenied) ++rejected;
    absl::SleepFor(absl::Milliseconds(20));
  }
  launcher.join();

  EXPECT_EQ(missing.status().code(), absl::StatusCode::kPermissionDenied) << missing.status();
  EXPECT_TRUE(absl::StrContains(missing.status().message(),
                                "rejected this process's token (it has none); every rank must "
                                "have the same DDPKIT_STORE_TOKEN (ddpkit launch sets it)"))
      << missing.status();
  EXPECT_GE(rejected, 3) << "the job ended before the stranger could knock again";
  ASSERT_EQ(job.status, 0) << job.out;
  EXPECT_TRUE(absl::StrContains(job.out, "world: 2 ranks (gloo)")) << job.out;
  EXPECT_TRUE(absl::StrContains(job.out, "store server: rejected peer 127.0.0.1:")) << job.out;
  EXPECT_TRUE(absl::StrContains(job.out, "its store token is missing")) << job.out;
  EXPECT_TRUE(absl::StrContains(job.out, "its store token is wrong")) << job.out;
}

// A token the user sets is the one every rank gets (how several nodes share one).
TEST(StoreTokenLaunchTest, AUserTokenIsPassedThrough) {
  testing_util::CommandResult r = testing_util::RunCommandMerged(
      "DDPKIT_STORE_TOKEN=shared-by-all-nodes " DDPKIT_BINARY_DIR
      "/bin/ddpkit launch --standalone --nproc-per-node 2 -- /bin/sh -c 'echo "
      "token=$DDPKIT_STORE_TOKEN'");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "[rank 0] token=shared-by-all-nodes")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "[rank 1] token=shared-by-all-nodes")) << r.out;
}

// Without one, the launcher draws a fresh 256-bit token per job, the same for all its ranks.
TEST(StoreTokenLaunchTest, TheLauncherDrawsOneTokenPerJob) {
  auto tokens = [] {
    testing_util::CommandResult r = testing_util::RunCommandMerged(
        "env -u DDPKIT_STORE_TOKEN " DDPKIT_BINARY_DIR
        "/bin/ddpkit launch --standalone --nproc-per-node 2 -- /bin/sh -c 'echo "
        "token=$DDPKIT_STORE_TOKEN'");
    EXPECT_EQ(r.status, 0) << r.out;
    std::vector<std::string> found;
    for (size_t at = r.out.find("token="); at != std::string::npos;
         at = r.out.find("token=", at + 1)) {
      found.push_back(r.out.substr(at + 6, r.out.find('\n', at) - at - 6));
    }
    return found;
  };
  const std::vector<std::string> first = tokens(), second = tokens();
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(first[0], first[1]);
  EXPECT_EQ(first[0].size(), 64u) << first[0];
  EXPECT_NE(first[0], second[0]);
}

}  // namespace
}  // namespace ddpkit::comm
