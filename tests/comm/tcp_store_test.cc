// The TCP rendezvous store, including peers that send garbage, strangers without the job's
// token, and the address it listens on.
#include "comm/store/tcp_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/match.h"
#include "comm/store/token.h"
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

// A raw socket to 127.0.0.x:port; -1 when the connection is refused.
int ConnectRaw(const char* ip, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip, &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

class GuardedStoreTest : public TcpStoreTest {
 protected:
  void SetUp() override {
    auto server = TcpStoreServer::Start("127.0.0.1", 0, kToken);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  absl::StatusOr<std::unique_ptr<TcpStore>> Connect(const std::string& token) {
    return TcpStore::Connect("127.0.0.1", server_->port(), absl::Seconds(5), token);
  }
  // Connects with `token`, expecting the clear rejection; returns what the server logged.
  std::string ExpectRejected(const std::string& token) {
    testing::internal::CaptureStderr();
    absl::StatusOr<std::unique_ptr<TcpStore>> stranger = Connect(token);
    const std::string log = testing::internal::GetCapturedStderr();
    EXPECT_FALSE(stranger.ok());
    if (!stranger.ok()) {
      EXPECT_EQ(stranger.status().code(), absl::StatusCode::kPermissionDenied);
      EXPECT_TRUE(absl::StrContains(stranger.status().message(),
                                    "the store at 127.0.0.1:" + std::to_string(server_->port()) +
                                        " rejected this process's token"))
          << stranger.status();
      EXPECT_TRUE(absl::StrContains(stranger.status().message(),
                                    "every rank must have the same DDPKIT_STORE_TOKEN (ddpkit "
                                    "launch sets it)"))
          << stranger.status();
    }
    return log;
  }
};

TEST_F(GuardedStoreTest, StrangersAreRejectedWhileTheJobCarriesOn) {
  auto member = Connect(kToken);
  ASSERT_TRUE(member.ok()) << member.status();
  ASSERT_TRUE((*member)->Set("job", "running").ok());

  const std::string missing = ExpectRejected("");
  EXPECT_TRUE(absl::StrContains(missing, "store server: rejected peer 127.0.0.1:")) << missing;
  EXPECT_TRUE(absl::StrContains(missing, "its store token is missing")) << missing;
  const std::string wrong = ExpectRejected("0123456789abcdef0123456789abcdeX");
  EXPECT_TRUE(absl::StrContains(wrong, "its store token is wrong")) << wrong;
  ExpectRejected("0123456789abcdef");  // a prefix of the token
  EXPECT_EQ(server_->rejected_peers(), 3);

  // The member never noticed; a second member joins.
  EXPECT_EQ(*(*member)->Get("job", absl::Seconds(1)), "running");
  auto second = Connect(kToken);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*(*second)->Add("n", 2), 2);
}

TEST_F(GuardedStoreTest, ARequestWithoutAHelloIsRejectedAndNotApplied) {
  const int fd = RawConnection();
  store::StoreRequest set;
  set.mutable_set()->set_key("job");
  set.mutable_set()->set_value("hijacked");
  ASSERT_TRUE(WriteFrame(fd, set.SerializeAsString()).ok());
  absl::StatusOr<std::string> reply = ReadFrame(fd, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(reply.ok()) << reply.status();
  absl::StatusOr<store::StoreResponse> response = DecodeResponse(*reply);
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->error(), "store token rejected: missing");
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
  auto member = Connect(kToken);
  ASSERT_TRUE(member.ok()) << member.status();
  EXPECT_FALSE(*(*member)->Check({"job"}));
  EXPECT_EQ(server_->rejected_peers(), 1);
}

TEST_F(GuardedStoreTest, BeforeItsTokenAPeerMaySendOnlySmallFrames) {
  const int fd = RawConnection();
  const uint32_t big = 64 << 10;  // fine for a member, too big for a Hello
  ASSERT_EQ(::send(fd, &big, 4, 0), 4);
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
  EXPECT_EQ(server_->dropped_peers(), 1);
}

TEST_F(TcpStoreTest, WithoutATokenTheServerAdmitsAnyClient) {
  auto with = TcpStore::Connect("127.0.0.1", server_->port(), absl::Seconds(5), "some-token");
  ASSERT_TRUE(with.ok()) << with.status();
  auto without = Client();
  ASSERT_TRUE(without);
  EXPECT_TRUE((*with)->Set("k", "v").ok());
  EXPECT_EQ(*without->Get("k", absl::Seconds(1)), "v");
  EXPECT_EQ(server_->rejected_peers(), 0);
}

// Linux routes all of 127/8 to the loopback device, so two loopback addresses stand in for two
// interfaces: a server bound to one is not reachable on the other.
TEST(TcpStoreBindTest, TheServerListensOnlyOnItsAddress) {
  auto on_1 = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(on_1.ok()) << on_1.status();
  const int port_1 = (*on_1)->port();
  int fd = ConnectRaw("127.0.0.1", port_1);
  EXPECT_GE(fd, 0);
  if (fd >= 0) ::close(fd);
  fd = ConnectRaw("127.0.0.2", port_1);
  EXPECT_EQ(fd, -1) << "a server started on 127.0.0.1 accepted a connection on 127.0.0.2";
  if (fd >= 0) ::close(fd);

  auto on_2 = TcpStoreServer::Start("127.0.0.2", 0);
  ASSERT_TRUE(on_2.ok()) << on_2.status();
  auto client = TcpStore::Connect("127.0.0.2", (*on_2)->port(), absl::Seconds(5));
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->Set("k", "v").ok());
  fd = ConnectRaw("127.0.0.1", (*on_2)->port());
  EXPECT_EQ(fd, -1) << "a server started on 127.0.0.2 accepted a connection on 127.0.0.1";
  if (fd >= 0) ::close(fd);
}

TEST(StoreTokenTest, TokensAreLongRandomHex) {
  absl::StatusOr<std::string> a = NewStoreToken(), b = NewStoreToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);  // 256 bits
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos) << *a;
  EXPECT_NE(*a, *b);
}

TEST(StoreTokenTest, TokensEqualOnlyWhenEqual) {
  EXPECT_TRUE(TokensEqual("abc", "abc"));
  EXPECT_FALSE(TokensEqual("abc", "abd"));
  EXPECT_FALSE(TokensEqual("abc", "xbc"));
  EXPECT_FALSE(TokensEqual("abc", "ab"));
  EXPECT_FALSE(TokensEqual("abc", "abcd"));
  EXPECT_FALSE(TokensEqual("abc", ""));
  EXPECT_FALSE(TokensEqual("ab", std::string("ab\0", 3)));
}

}  // namespace
}  // namespace ddpkit::comm
