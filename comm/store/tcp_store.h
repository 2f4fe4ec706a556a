// TcpStore: the Store served over TCP by rank 0 (torchrun's MASTER_ADDR:MASTER_PORT).
//
// TcpStoreServer runs one thread with a poll() loop over its connections; blocking requests
// (get, wait) are parked until their keys appear or their deadline passes. It never trusts a
// peer: a frame over kMaxFrameBytes, bytes that are not a StoreRequest, a request with no
// operation, or a connection closed mid-frame drops that peer with one log line; the server
// and its other clients carry on.
//
// Guarded: a server started with a token (DDPKIT_STORE_TOKEN; `ddpkit launch` draws one per
// job) admits a connection only once it has presented the same token in its first request
// (a Hello; comm/store/frame.h); a missing or wrong one is answered with an error, logged with
// the peer's ip:port, and the connection closed. With no token, any Hello is admitted.
//
// TcpStore is the client: one connection, one request at a time (guarded by a mutex); it
// presents its token when it connects and fails clearly (PermissionDenied) when rejected.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/store/frame.h"
#include "comm/store/store.h"

namespace ddpkit::comm {

class TcpStoreServer {
 public:
  // Listens on `host`:`port` only (the address `host` resolves to, not every interface; port 0
  // picks a free one; see port()). A non-empty `token` is required of every connection.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, int port,
                                                               std::string token = "");
  ~TcpStoreServer();  // stops the loop and closes every connection
  int port() const { return port_; }
  // Peers dropped for sending something invalid (for tests and diagnostics).
  int dropped_peers() const;
  // Connections turned away for a missing or wrong token.
  int rejected_peers() const;

 private:
  TcpStoreServer(int listen_fd, int port, int wake_fd_read, int wake_fd_write, std::string token);
  void Loop();

  const int listen_fd_;
  const int port_;
  const int wake_read_, wake_write_;  // a pipe that interrupts poll() at shutdown
  const std::string token_;           // empty: none required
  std::thread thread_;
  std::atomic<int> dropped_{0};
  std::atomic<int> rejected_{0};
  friend class StoreServerLoop;
};

class TcpStore : public Store {
 public:
  // Connects, retrying until `timeout` (the server may not be up yet), and presents `token`.
  // PermissionDenied when the server rejects it. The token's answer is awaited until the
  // timeout, and at least `least_hello_wait` (a loaded server answers late; a caller on one
  // hard deadline passes zero).
  static absl::StatusOr<std::unique_ptr<TcpStore>> Connect(
      const std::string& host, int port, absl::Duration timeout, const std::string& token = "",
      absl::Duration least_hello_wait = absl::Seconds(5));
  ~TcpStore() override;

  absl::Status Set(const std::string& key, const std::string& value,
                   absl::Duration reply_timeout = kStoreReplyTimeout) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta,
                              absl::Duration reply_timeout = kStoreReplyTimeout) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys,
                             absl::Duration reply_timeout = kStoreReplyTimeout) override;

 private:
  TcpStore(int fd, std::string address) : fd_(fd), address_(std::move(address)) {}
  // Presents `token`: the first request of every connection.
  absl::Status Hello(const std::string& token, absl::Duration timeout);
  // Sends a serialised request and reads the reply, waiting at most `timeout` for it. A round
  // trip that fails leaves the connection unusable (a late reply would answer the next
  // request), so every later one fails at once with the first error: a stuck store host costs
  // one timeout, not one per call.
  absl::StatusOr<std::string> RoundTrip(const std::string& request, absl::Duration timeout);

  const int fd_;
  const std::string address_;
  std::mutex mu_;        // one request in flight at a time
  absl::Status broken_;  // guarded by mu_: the first failed round trip
};

// Frames on a blocking socket: [u32 little-endian length][payload]. Exposed for the tests
// that feed the server garbage.
absl::Status WriteFrame(int fd, const std::string& payload);
absl::StatusOr<std::string> ReadFrame(int fd, absl::Time deadline);

}  // namespace ddpkit::comm
