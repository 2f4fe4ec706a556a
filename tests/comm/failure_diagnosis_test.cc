#include "comm/failure_diagnosis.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "comm/store/tcp_store.h"
#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

class FailureDiagnosisTest : public testing::Test {
 protected:
  void SetUp() override {
    auto server = TcpStoreServer::Start("127.0.0.1", 0);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    options_.timeout = absl::Milliseconds(300);  // DiagnosisTime: 300 ms
  }
  std::unique_ptr<TcpStore> Client() {
    auto client = TcpStore::Connect("127.0.0.1", server_->port(), absl::Seconds(5));
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }
  std::unique_ptr<TcpStoreServer> server_;
  ProcessGroupOptions options_;
};

TEST_F(FailureDiagnosisTest, ARankThatNeverFailsIsNamed) {
  std::unique_ptr<TcpStore> store = Client();
  const std::string who = RanksThatDidNotArrive(*store, 0, 3, 7, options_);
  EXPECT_TRUE(absl::StrContains(who, "ranks 1, 2 did not reach this collective")) << who;
}

// A lossy or flapping link between live ranks: each waited past its timeout for data the other
// had sent, so every one records the failure and nobody is to blame but the network.
TEST_F(FailureDiagnosisTest, WhenEveryRankFailedInItTheNetworkIsNamed) {
  std::unique_ptr<TcpStore> a = Client(), b = Client();
  std::string who_a, who_b;
  std::thread other([&] { who_b = RanksThatDidNotArrive(*b, 1, 2, 9, options_); });
  who_a = RanksThatDidNotArrive(*a, 0, 2, 9, options_);
  other.join();
  for (const std::string& who : {who_a, who_b}) {
    EXPECT_TRUE(absl::StrContains(who, "every rank reached this collective and failed in it"))
        << who;
    EXPECT_TRUE(absl::StrContains(who, "the network between them lost or held up its data")) << who;
  }
}

// Under loss a rank whose share of a ring allreduce got through moves on and fails in the next
// collective (11 + 1) while its peers still wait in this one: it passed, so it is not named; a
// rank that recorded nothing anywhere still is.
TEST_F(FailureDiagnosisTest, ARankThatPassedAndFailedInTheNextIsNotNamed) {
  std::unique_ptr<TcpStore> a = Client(), b = Client();
  std::string who_b;
  std::thread ahead([&] { who_b = RanksThatDidNotArrive(*b, 1, 3, 12, options_); });
  const std::string who_a = RanksThatDidNotArrive(*a, 0, 3, 11, options_);
  ahead.join();
  EXPECT_TRUE(absl::StrContains(who_a, "; rank 2 did not reach this collective")) << who_a;
  // Rank 0 has not reached 12 (nor 13, 14): from rank 1's side it is named beside rank 2.
  EXPECT_TRUE(absl::StrContains(who_b, "ranks 0, 2 did not reach this collective")) << who_b;
}

// Rank 2 is alive inside the collective, waiting on a peer; its deadline watch asks every 50 ms
// here whether a peer failed. Rank 0's diagnosis tells it apart from rank 1, which never came.
TEST_F(FailureDiagnosisTest, ALiveRankWaitingInTheCollectiveIsToldApartFromAMissingOne) {
  std::unique_ptr<TcpStore> a = Client(), c = Client();
  std::atomic<bool> recorded{false};
  std::thread waiting([&] {
    for (int i = 0; i < 40 && !recorded; ++i) {
      recorded = RecordWaitingIfAPeerFailed(*c, 2, 21, absl::Milliseconds(200));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  const std::string who = RanksThatDidNotArrive(*a, 0, 3, 21, options_);
  waiting.join();
  EXPECT_TRUE(recorded);
  EXPECT_TRUE(absl::StrContains(who, "; rank 1 did not reach this collective")) << who;
  EXPECT_TRUE(absl::StrContains(who, "; rank 2 reached it and, alive, still waited in it")) << who;
}

// Nobody has failed: a rank long inside a collective records nothing.
TEST_F(FailureDiagnosisTest, ARankWaitingWhileNoPeerFailedRecordsNothing) {
  std::unique_ptr<TcpStore> c = Client();
  EXPECT_FALSE(RecordWaitingIfAPeerFailed(*c, 2, 30, absl::Milliseconds(200)));
  EXPECT_FALSE(*c->Check({"ddpkit/failed/30/2"}, absl::Seconds(1)));
}

}  // namespace
}  // namespace ddpkit::comm
