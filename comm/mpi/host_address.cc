#include "comm/mpi/host_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <optional>

namespace ddpkit::comm::mpi {
namespace {

bool IsLoopback(const sockaddr_in& address) {
  return (ntohl(address.sin_addr.s_addr) >> 24) == 127;
}

// Whether `name` resolves to at least one IPv4 address outside 127.0.0.0/8.
bool ResolvesBeyondLoopback(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0) return false;
  bool beyond = false;
  for (addrinfo* a = found; a != nullptr && !beyond; a = a->ai_next) {
    beyond = !IsLoopback(*reinterpret_cast<const sockaddr_in*>(a->ai_addr));
  }
  ::freeaddrinfo(found);
  return beyond;
}

// The first IPv4 address of an interface that is up and not loopback.
std::optional<std::string> FirstInterfaceAddress() {
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) != 0) return std::nullopt;
  std::optional<std::string> address;
  for (ifaddrs* i = interfaces; i != nullptr && !address; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET_ADDRSTRLEN];
    const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) address = text;
  }
  ::freeifaddrs(interfaces);
  return address;
}

}  // namespace

std::string AddressForOtherHosts() {
  char name[256] = "localhost";
  ::gethostname(name, sizeof(name) - 1);
  if (ResolvesBeyondLoopback(name)) return name;
  return FirstInterfaceAddress().value_or(name);
}

}  // namespace ddpkit::comm::mpi
