#include "tools/launch/agent_client.h"

#include <algorithm>

#include "autograd/base/error.h"

namespace ddpkit::launch {

absl::StatusOr<std::unique_ptr<AgentClient>> AgentClient::Connect(const AgentAddress& address) {
  DDPKIT_ASSIGN_OR_RETURN(
      std::unique_ptr<comm::TcpStore> store,
      comm::TcpStore::Connect(address.host, address.port, address.node_timeout, address.token));
  return std::unique_ptr<AgentClient>(new AgentClient(address, std::move(store)));
}

// One deadline for the request and its retry: the first try gets half the node timeout, the
// reconnect and the second try the rest, so a cut-off node 0 is counted lost within one node
// timeout, not two or more (a chaos trial's cut-off launcher once ran to twice the timeout).
template <typename Request>
auto AgentClient::Retried(const Request& request)
    -> decltype(request(std::declval<comm::TcpStore&>(), absl::Duration())) {
  const absl::Time deadline = absl::Now() + address_.node_timeout;
  auto result = request(*store_, address_.node_timeout / 2);
  if (!absl::IsDeadlineExceeded(result.status())) return result;  // answered, or closed
  absl::StatusOr<std::unique_ptr<comm::TcpStore>> again =
      comm::TcpStore::Connect(address_.host, address_.port, deadline - absl::Now(), address_.token,
                              /*least_hello_wait=*/absl::ZeroDuration());
  if (!again.ok()) return again.status();
  store_ = *std::move(again);
  return request(*store_, std::max(deadline - absl::Now(), absl::ZeroDuration()));
}

absl::Status AgentClient::Set(const std::string& key, const std::string& value) {
  absl::StatusOr<bool> set =
      Retried([&](comm::TcpStore& store, absl::Duration timeout) -> absl::StatusOr<bool> {
        DDPKIT_RETURN_IF_ERROR(store.Set(key, value, timeout));
        return true;
      });
  return set.status();
}

absl::StatusOr<int64_t> AgentClient::Add(const std::string& key, int64_t delta) {
  return Retried([&](comm::TcpStore& store, absl::Duration timeout) {
    return store.Add(key, delta, timeout);
  });
}

absl::StatusOr<bool> AgentClient::Check(const std::vector<std::string>& keys) {
  return Retried(
      [&](comm::TcpStore& store, absl::Duration timeout) { return store.Check(keys, timeout); });
}

absl::StatusOr<std::string> AgentClient::Get(const std::string& key) {
  return Retried(
      [&](comm::TcpStore& store, absl::Duration timeout) { return store.Get(key, timeout); });
}

}  // namespace ddpkit::launch
