#include "comm/gloo/connect_diagnosis.h"

#include <arpa/inet.h>
#include <gloo/transport/tcp/address.h>
#include <netinet/in.h>

#include <vector>

#include "absl/strings/str_join.h"
#include "autograd/base/error.h"

namespace ddpkit::comm {
namespace {

using gloo::transport::tcp::Address;

GlooPeerAddress Readable(const Address& address) {
  GlooPeerAddress out{.gloo_text = address.str(), .host = "", .port = 0};
  const sockaddr_storage& ss = address.getSockaddr();
  char host[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    out.port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    out.port = ntohs(in6->sin6_port);
  }
  out.host = host;
  return out;
}

// Each rank's full-mesh record, read within `deadline`; a rank that published none is left out.
std::vector<std::optional<std::string>> PublishedRecords(Store& store, int size,
                                                         absl::Time deadline) {
  std::vector<std::optional<std::string>> records(size);
  for (int r = 0; r < size; ++r) {
    const std::string key = StrCat("gloo/", r);
    absl::StatusOr<bool> there = store.Check({key}, deadline - absl::Now());
    if (!there.ok()) break;  // the store is gone: say what can be said without it
    if (!*there) continue;
    absl::StatusOr<std::string> value = store.Get(key, deadline - absl::Now());
    if (value.ok()) records[r] = *std::move(value);
  }
  return records;
}

// `port` 0: several ranks share the host, and the error did not say which one's port.
std::string Advice(int rank, const std::string& who, const std::string& host, int port) {
  return StrCat("; rank ", rank, " could not reach ", who, " (host ", host,
                port > 0 ? StrCat(", port ", port) : "",
                ") while Gloo's ranks connected to each other (connectFullMesh, right after the "
                "rendezvous): check that it is running and that host ",
                host,
                " is reachable from this rank's host (its link, a firewall, routing), then start "
                "the job again");
}

}  // namespace

std::optional<GlooPeerAddress> AddressPublishedFor(std::string_view published, int publisher,
                                                   int peer, int size) {
  const size_t width = Address().bytes().size();
  if (publisher == peer || peer < 0 || peer >= size || published.size() != width * (size - 1)) {
    return std::nullopt;
  }
  const size_t slot = peer < publisher ? peer : peer - 1;  // the record leaves its own rank out
  const char* begin = published.data() + slot * width;
  return Readable(Address(std::vector<char>(begin, begin + width)));
}

std::string NameUnreachablePeer(Store& store, int rank, int size, std::string_view gloo_error,
                                absl::Duration within) {
  const std::vector<std::optional<std::string>> records =
      PublishedRecords(store, size, absl::Now() + within);
  std::vector<int> on_host;  // when no exact address matches: the ranks on the named host
  GlooPeerAddress host_address;
  for (int r = 0; r < size; ++r) {
    if (r == rank || !records[r]) continue;
    const std::optional<GlooPeerAddress> address = AddressPublishedFor(*records[r], r, rank, size);
    if (!address) continue;
    if (gloo_error.find(address->gloo_text) != std::string_view::npos) {
      return Advice(rank, StrCat("rank ", r), address->host, address->port);
    }
    if (gloo_error.find(StrCat("[", address->host, "]")) != std::string_view::npos) {
      on_host.push_back(r);
      host_address = *address;
    }
  }
  if (on_host.empty()) return "";
  if (on_host.size() == 1) {
    return Advice(rank, StrCat("rank ", on_host[0]), host_address.host, host_address.port);
  }
  return Advice(rank, StrCat("one of ranks ", absl::StrJoin(on_host, ", ")), host_address.host, 0);
}

}  // namespace ddpkit::comm
