// TcpStore: the Store served over TCP by rank 0 (torchrun's MASTER_ADDR:MASTER_PORT).
//
// TcpStoreServer runs one thread with a poll() loop over its connections; blocking requests
// (get, wait) are parked until their keys appear or their deadline passes. It never trusts a
// peer: a frame over kMaxFrameBytes, bytes that are not a StoreRequest, a request with no
// operation, or a connection closed mid-frame drops that peer with one log line; the server
// and its other clients carry on.
//
// TcpStore is the client: one connection, one request at a time (guarded by a mutex).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/store/store.h"

namespace ddpkit::comm {

inline constexpr uint32_t kMaxFrameBytes = 16u << 20;

class TcpStoreServer {
 public:
  // Listens on `host`:`port` (port 0 picks a free one; see port()).
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, int port);
  ~TcpStoreServer();  // stops the loop and closes every connection
  int port() const { return port_; }
  // Peers dropped for sending something invalid (for tests and diagnostics).
  int dropped_peers() const;

 private:
  TcpStoreServer(int listen_fd, int port, int wake_fd_read, int wake_fd_write);
  void Loop();

  const int listen_fd_;
  const int port_;
  const int wake_read_, wake_write_;  // a pipe that interrupts poll() at shutdown
  std::thread thread_;
  std::atomic<int> dropped_{0};
  friend class StoreServerLoop;
};

class TcpStore : public Store {
 public:
  // Connects, retrying until `timeout` (the server may not be up yet).
  static absl::StatusOr<std::unique_ptr<TcpStore>> Connect(const std::string& host, int port,
                                                           absl::Duration timeout);
  ~TcpStore() override;

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys) override;

 private:
  TcpStore(int fd, std::string address) : fd_(fd), address_(std::move(address)) {}
  // Sends a serialised request and reads the reply, waiting at most `timeout` for it.
  absl::StatusOr<std::string> RoundTrip(const std::string& request, absl::Duration timeout);

  const int fd_;
  const std::string address_;
  std::mutex mu_;  // one request in flight at a time
};

// Frames on a blocking socket: [u32 little-endian length][payload]. Exposed for the tests
// that feed the server garbage.
absl::Status WriteFrame(int fd, const std::string& payload);
absl::StatusOr<std::string> ReadFrame(int fd, absl::Time deadline);

}  // namespace ddpkit::comm
