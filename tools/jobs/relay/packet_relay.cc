#include "tools/jobs/relay/packet_relay.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "autograd/base/error.h"
#include "autograd/base/file_util.h"

namespace ddpkit::jobs {
namespace {

// What PACKET_VNET_HDR puts before each frame: struct virtio_net_hdr, 10 bytes (its header,
// linux/virtio_net.h, does not compile as C++). Then a frame of up to 64 KiB (a TSO segment).
constexpr size_t kVnetHeader = 10;
constexpr size_t kMaxRead = kVnetHeader + 65536;
constexpr int kReadsPerWake = 256;  // so one busy direction cannot starve the other

volatile sig_atomic_t stop_requested = 0;
volatile sig_atomic_t reload_requested = 0;

void OnSignal(int signal) {
  if (signal == SIGUSR1) {
    reload_requested = 1;
  } else {
    stop_requested = 1;
  }
}

struct Frame {
  absl::Time due;
  std::string bytes;
};

struct Side {
  std::string name;
  int fd = -1;
};

struct Direction {
  const Side* from;
  const Side* to;
  std::deque<Frame> queue{};
  int64_t queued_bytes = 0;
  RelayDirection stats{};
};

absl::Status SocketError(const std::string& what, const std::string& name) {
  const std::string text = StrCat(what, " on ", name, ": ", std::strerror(errno));
  if (errno == EPERM || errno == EACCES) {
    return absl::PermissionDeniedError(StrCat(text, " (the relay needs root or CAP_NET_RAW)"));
  }
  return absl::UnavailableError(text);
}

absl::Status SetOption(int fd, int option, const void* value, socklen_t size,
                       const std::string& name) {
  if (::setsockopt(fd, SOL_PACKET, option, value, size) == 0) return absl::OkStatus();
  return SocketError(StrCat("setsockopt(SOL_PACKET, ", option, ")"), name);
}

// Room for `bytes` of frames waiting to be read: SO_RCVBUFFORCE past the system's limit
// (net.core.rmem_max) where the relay may (CAP_NET_ADMIN), else as much as SO_RCVBUF gives.
void SetReceiveBuffer(int fd, int bytes) {
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) == 0) return;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

// The frames the kernel dropped on `side` since the socket opened: its buffer was full.
int64_t SocketDrops(const Side& side) {
  tpacket_stats stats{};
  socklen_t size = sizeof(stats);
  if (::getsockopt(side.fd, SOL_PACKET, PACKET_STATISTICS, &stats, &size) != 0) return 0;
  return stats.tp_drops;
}

// A raw socket on interface `name` that sees every frame arriving there (promiscuous: a veth
// frame for another host's address is still the relay's to pass on), never its own sends.
absl::Status OpenSide(Side& side, int buffer_bytes) {
  const int ifindex = static_cast<int>(::if_nametoindex(side.name.c_str()));
  if (ifindex == 0) {
    return absl::NotFoundError(StrCat("no interface '", side.name, "' in this network namespace"));
  }
  // Protocol 0 until bound, so no frame of another interface is queued in between.
  side.fd = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (side.fd < 0) return SocketError("socket(AF_PACKET)", side.name);
  const int one = 1;
  DDPKIT_RETURN_IF_ERROR(SetOption(side.fd, PACKET_VNET_HDR, &one, sizeof(one), side.name));
  DDPKIT_RETURN_IF_ERROR(SetOption(side.fd, PACKET_IGNORE_OUTGOING, &one, sizeof(one), side.name));
  SetReceiveBuffer(side.fd, buffer_bytes);
  sockaddr_ll address{};
  address.sll_family = AF_PACKET;
  address.sll_protocol = htons(ETH_P_ALL);
  address.sll_ifindex = ifindex;
  if (::bind(side.fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    return SocketError("bind", side.name);
  }
  packet_mreq promiscuous{};
  promiscuous.mr_ifindex = ifindex;
  promiscuous.mr_type = PACKET_MR_PROMISC;
  return SetOption(side.fd, PACKET_ADD_MEMBERSHIP, &promiscuous, sizeof(promiscuous), side.name);
}

absl::StatusOr<absl::Duration> ReadDelay(const std::string& path) {
  DDPKIT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  double ms = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &ms) || ms < 0) {
    return absl::InvalidArgumentError(StrCat("the relay's control file ", path, " holds '",
                                             absl::StripAsciiWhitespace(text),
                                             "', not a delay in milliseconds >= 0"));
  }
  return absl::Milliseconds(ms);
}

// What a frame arriving at `now` is held: the delay, and the spike's extra in its window.
absl::Duration HoldFor(const RelayConfig& config, absl::Duration delay, absl::Time start,
                       absl::Time now) {
  const absl::Duration since = now - start;
  const bool spiking = config.spike > absl::ZeroDuration() && since >= config.spike_at &&
                       since < config.spike_at + config.spike_for;
  return spiking ? delay + config.spike : delay;
}

// Reads what has arrived on the direction's source, each frame due at `arrived + hold` but
// never before the one ahead of it (the order is kept when the delay falls).
void Receive(Direction& d, absl::Duration hold, int64_t max_queued) {
  static char buffer[kMaxRead];
  for (int i = 0; i < kReadsPerWake; ++i) {
    const ssize_t n = ::recv(d.from->fd, buffer, sizeof(buffer), MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0) return;  // nothing more (EAGAIN), or an error the next poll reports
    const size_t size = static_cast<size_t>(n);
    if (size > sizeof(buffer) || d.queued_bytes + n > max_queued) {
      ++d.stats.dropped;
      continue;
    }
    absl::Time due = absl::Now() + hold;
    if (!d.queue.empty()) due = std::max(due, d.queue.back().due);
    d.queue.push_back({due, std::string(buffer, buffer + size)});
    d.queued_bytes += n;
  }
}

// Sends every frame that is due, in order.
void SendDue(Direction& d, absl::Time now) {
  while (!d.queue.empty() && d.queue.front().due <= now) {
    const std::string& bytes = d.queue.front().bytes;
    if (::send(d.to->fd, bytes.data(), bytes.size(), 0) < 0) {
      ++d.stats.send_errors;
    } else {
      ++d.stats.frames;
      d.stats.bytes += static_cast<int64_t>(bytes.size() - kVnetHeader);
    }
    d.queued_bytes -= static_cast<int64_t>(bytes.size());
    d.queue.pop_front();
  }
}

// How long to sleep: until the next frame is due (nullopt: until something arrives).
std::optional<timespec> UntilNextDue(const Direction& a, const Direction& b, absl::Time now) {
  absl::Time next = absl::InfiniteFuture();
  if (!a.queue.empty()) next = std::min(next, a.queue.front().due);
  if (!b.queue.empty()) next = std::min(next, b.queue.front().due);
  if (next == absl::InfiniteFuture()) return std::nullopt;
  return absl::ToTimespec(std::max(next - now, absl::ZeroDuration()));
}

// A pending error on a side (its link went down, say) is read and cleared, so poll stops
// reporting it; forwarding goes on once the link is back.
void ClearError(const Side& side) {
  int error = 0;
  socklen_t size = sizeof(error);
  ::getsockopt(side.fd, SOL_SOCKET, SO_ERROR, &error, &size);
}

// Signals arrive only inside ppoll, so a stop or reload is never missed between checks.
sigset_t BlockRelaySignals() {
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigset_t relay_signals, previous;
  sigemptyset(&relay_signals);
  for (int signal : {SIGTERM, SIGINT, SIGUSR1}) {
    ::sigaction(signal, &action, nullptr);
    sigaddset(&relay_signals, signal);
  }
  ::sigprocmask(SIG_BLOCK, &relay_signals, &previous);
  for (int signal : {SIGTERM, SIGINT, SIGUSR1}) sigdelset(&previous, signal);
  return previous;
}

absl::Status Forward(const RelayConfig& config, Direction& ab, Direction& ba) {
  const sigset_t wake_on = BlockRelaySignals();
  const absl::Time start = absl::Now();
  absl::Duration delay = config.delay;
  pollfd fds[2] = {{ab.from->fd, POLLIN, 0}, {ba.from->fd, POLLIN, 0}};
  while (!stop_requested) {
    if (reload_requested) {
      reload_requested = 0;
      DDPKIT_ASSIGN_OR_RETURN(delay, ReadDelay(config.control_file));
    }
    const absl::Time now = absl::Now();
    SendDue(ab, now);
    SendDue(ba, now);
    const std::optional<timespec> wait = UntilNextDue(ab, ba, now);
    if (::ppoll(fds, 2, wait ? &*wait : nullptr, &wake_on) < 0 && errno != EINTR) {
      return absl::UnavailableError(StrCat("the relay's poll failed: ", std::strerror(errno)));
    }
    const absl::Duration hold = HoldFor(config, delay, start, absl::Now());
    for (int i = 0; i < 2; ++i) {
      Direction& d = i == 0 ? ab : ba;
      if (fds[i].revents & POLLERR) ClearError(*d.from);
      if (fds[i].revents & POLLIN) Receive(d, hold, config.max_queued_bytes);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RelayStats> RunRelay(const RelayConfig& config, const std::function<void()>& ready) {
  if (config.side_a == config.side_b) {
    return absl::InvalidArgumentError(
        StrCat("the relay needs two different interfaces, got '", config.side_a, "' twice"));
  }
  Side a{.name = config.side_a}, b{.name = config.side_b};
  absl::Status opened = OpenSide(a, config.socket_buffer_bytes);
  if (opened.ok()) opened = OpenSide(b, config.socket_buffer_bytes);
  Direction ab{.from = &a, .to = &b}, ba{.from = &b, .to = &a};
  absl::Status forwarded = opened;
  if (opened.ok()) {
    if (ready) ready();
    forwarded = Forward(config, ab, ba);
    ab.stats.socket_dropped = SocketDrops(a), ba.stats.socket_dropped = SocketDrops(b);
  }
  for (const Side* side : {&a, &b}) {
    if (side->fd >= 0) ::close(side->fd);
  }
  DDPKIT_RETURN_IF_ERROR(forwarded);
  return RelayStats{.a_to_b = ab.stats, .b_to_a = ba.stats};
}

}  // namespace ddpkit::jobs
