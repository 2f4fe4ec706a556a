// A launcher's connection to node 0's agent store (tools/launch/restart_round.h). Node 0's
// launcher gone closes the connection: a request then fails at once. A request that node 0's
// host leaves unanswered for half the node timeout (a cut link, TCP backing off after it comes
// back) reconnects once and is sent again, all within one node timeout; only when that fails is
// node 0 counted lost. (A TcpStore connection is unusable after a request that timed out.)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/store/tcp_store.h"

namespace ddpkit::launch {

struct AgentAddress {
  std::string host;
  int port = 0;
  std::string token;
  absl::Duration node_timeout;
};

class AgentClient {
 public:
  static absl::StatusOr<std::unique_ptr<AgentClient>> Connect(const AgentAddress& address);

  absl::Status Set(const std::string& key, const std::string& value);
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta);
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys);
  absl::StatusOr<std::string> Get(const std::string& key);  // of a key known to be there
  // The connection as it is, without the retry: for a caller on a short deadline.
  comm::TcpStore& store() { return *store_; }

 private:
  AgentClient(AgentAddress address, std::unique_ptr<comm::TcpStore> store)
      : address_(std::move(address)), store_(std::move(store)) {}
  template <typename Request>
  auto Retried(const Request& request)
      -> decltype(request(std::declval<comm::TcpStore&>(), absl::Duration()));

  const AgentAddress address_;
  std::unique_ptr<comm::TcpStore> store_;
};

}  // namespace ddpkit::launch
