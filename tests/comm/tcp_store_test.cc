// The TCP rendezvous store, including peers that send garbage.
#include "comm/store/tcp_store.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

class TcpStoreTest : public testing::Test {
 protected:
  void SetUp() override {
    auto server = TcpStoreServer::Start("127.0.0.1", 0);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  std::unique_ptr<TcpStore> Client() {
    auto client = TcpStore::Connect("127.0.0.1", server_->port(), absl::Seconds(5));
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }
  // A raw socket to the server, for sending what a real client never would.
  int RawConnection() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    return fd;
  }
  // True when the server closed `fd` (read returns 0) within a second.
  static bool ClosedByServer(int fd) {
    timeval tv{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char byte;
    return ::recv(fd, &byte, 1, 0) == 0;
  }
  std::unique_ptr<TcpStoreServer> server_;
};

TEST_F(TcpStoreTest, SetGetAddWaitCheck) {
  auto a = Client(), b = Client();
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a->Set("k", std::string("v\0x", 3)).ok());
  EXPECT_EQ(*b->Get("k", absl::Seconds(1)), std::string("v\0x", 3));
  EXPECT_EQ(*a->Add("n", 5), 5);
  EXPECT_EQ(*b->Add("n", -2), 3);
  EXPECT_TRUE(*a->Check({"k", "n"}));
  EXPECT_FALSE(*a->Check({"k", "missing"}));
  EXPECT_FALSE(a->Add("k", 1).ok());  // not an integer
}

TEST_F(TcpStoreTest, GetWaitsForAKeySetLater) {
  auto a = Client(), b = Client();
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(b->Set("late", "here").ok());
  });
  EXPECT_EQ(*a->Get("late", absl::Seconds(5)), "here");
  EXPECT_TRUE(a->Wait({"late"}, absl::Seconds(1)).ok());
  setter.join();
}

TEST_F(TcpStoreTest, WaitTimesOutNamingTheMissingKeys) {
  auto a = Client();
  a->Set("present", "1").IgnoreError();
  absl::Status status = a->Wait({"present", "rank3/ready"}, absl::Milliseconds(200));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(status.message(), "timed out waiting for key rank3/ready"))
      << status;
  EXPECT_TRUE(a->Set("after", "still usable").ok());
}

TEST_F(TcpStoreTest, ConnectToNothingFailsClearly) {
  auto client = TcpStore::Connect("127.0.0.1", 1, absl::Milliseconds(200));
  ASSERT_FALSE(client.ok());
  EXPECT_TRUE(absl::StrContains(client.status().message(), "is rank 0 running")) << client.status();
}

TEST_F(TcpStoreTest, OversizedFrameDropsThePeerNotTheServer) {
  const int fd = RawConnection();
  const uint32_t huge = 0xfffffff0u;  // announces ~4 GiB: must not be allocated
  ASSERT_EQ(::send(fd, &huge, 4, 0), 4);
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
  auto a = Client();
  EXPECT_TRUE(a->Set("k", "v").ok());
  EXPECT_EQ(server_->dropped_peers(), 1);
}

TEST_F(TcpStoreTest, GarbageAndUnknownOperationsDropThePeer) {
  const int garbage = RawConnection();
  ASSERT_TRUE(WriteFrame(garbage, std::string("\xff\xff\xff\xff\xff", 5)).ok());
  EXPECT_TRUE(ClosedByServer(garbage));
  ::close(garbage);

  const int empty = RawConnection();  // parses, but no operation set
  ASSERT_TRUE(WriteFrame(empty, "").ok());
  EXPECT_TRUE(ClosedByServer(empty));
  ::close(empty);

  const int truncated = RawConnection();  // half a frame, then hang up
  const char partial[] = {10, 0, 0, 0, 1, 2};
  ASSERT_EQ(::send(truncated, partial, sizeof(partial), 0), 6);
  ::close(truncated);
  absl::SleepFor(absl::Milliseconds(100));

  EXPECT_EQ(server_->dropped_peers(), 3);
  auto a = Client();
  EXPECT_TRUE(a->Set("still", "serving").ok());
}

}  // namespace
}  // namespace ddpkit::comm
