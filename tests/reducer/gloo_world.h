// A real Gloo world inside the test process: one thread per rank, each with its own Gloo group
// over loopback TCP and one store. The cheapest way to run DDP on the gloo backend (no launcher,
// no processes); the same collectives `ddpkit launch` jobs use.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "comm/gloo/process_group_gloo.h"
#include "comm/store/tcp_store.h"
#include "gtest/gtest.h"

namespace ddpkit::reducer::testing {

// Debian's libgloo is not built for ThreadSanitizer; its own threads would be misreported.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kGlooUnderTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kGlooUnderTsan = true;
#else
inline constexpr bool kGlooUnderTsan = false;
#endif
#else
inline constexpr bool kGlooUnderTsan = false;
#endif

// Runs body(group) on `world` rank threads, each on its own Gloo group; fails the test with a
// rank's error (a failed rendezvous, or what body threw).
inline void RunGlooWorld(int world, const std::function<void(comm::ProcessGroup&)>& body) {
  auto server = comm::TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::vector<std::string> errors(world);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      const comm::ProcessGroupOptions options{.timeout = absl::Seconds(60)};
      auto store = comm::TcpStore::Connect("127.0.0.1", port, options.timeout);
      if (!store.ok()) return void(errors[rank] = store.status().ToString());
      auto group = comm::CreateGlooProcessGroup(
          rank, world, std::shared_ptr<comm::Store>(*std::move(store)), "127.0.0.1", options);
      if (!group.ok()) return void(errors[rank] = group.status().ToString());
      try {
        body(**group);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_EQ(errors[rank], "") << "gloo rank " << rank;
  }
}

}  // namespace ddpkit::reducer::testing
