#include "tools/launch/agent_client.h"

#include "autograd/base/error.h"

namespace ddpkit::launch {

absl::StatusOr<std::unique_ptr<AgentClient>> AgentClient::Connect(const AgentAddress& address) {
  DDPKIT_ASSIGN_OR_RETURN(
      std::unique_ptr<comm::TcpStore> store,
      comm::TcpStore::Connect(address.host, address.port, address.node_timeout, address.token));
  return std::unique_ptr<AgentClient>(new AgentClient(address, std::move(store)));
}

template <typename Request>
auto AgentClient::Retried(const Request& request)
    -> decltype(request(std::declval<comm::TcpStore&>())) {
  auto result = request(*store_);
  if (!absl::IsDeadlineExceeded(result.status())) return result;  // answered, or closed
  absl::StatusOr<std::unique_ptr<comm::TcpStore>> again =
      comm::TcpStore::Connect(address_.host, address_.port, address_.node_timeout, address_.token);
  if (!again.ok()) return again.status();
  store_ = *std::move(again);
  return request(*store_);
}

absl::Status AgentClient::Set(const std::string& key, const std::string& value) {
  absl::StatusOr<bool> set = Retried([&](comm::TcpStore& store) -> absl::StatusOr<bool> {
    DDPKIT_RETURN_IF_ERROR(store.Set(key, value, address_.node_timeout));
    return true;
  });
  return set.status();
}

absl::StatusOr<int64_t> AgentClient::Add(const std::string& key, int64_t delta) {
  return Retried(
      [&](comm::TcpStore& store) { return store.Add(key, delta, address_.node_timeout); });
}

absl::StatusOr<bool> AgentClient::Check(const std::vector<std::string>& keys) {
  return Retried([&](comm::TcpStore& store) { return store.Check(keys, address_.node_timeout); });
}

absl::StatusOr<std::string> AgentClient::Get(const std::string& key) {
  return Retried([&](comm::TcpStore& store) { return store.Get(key, address_.node_timeout); });
}

}  // namespace ddpkit::launch
