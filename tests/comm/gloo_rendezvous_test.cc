// The Gloo rendezvous when a rank never comes (its own binary, labelled gloo: Debian's libgloo
// is not built for ThreadSanitizer).
#include "absl/strings/match.h"
#include "comm/rendezvous.h"
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

}  // namespace
}  // namespace ddpkit::comm
