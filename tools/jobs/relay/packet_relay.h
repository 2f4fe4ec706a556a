// `ddpkit relay`: a delaying link between two interfaces, in user space, for the test hosts
// (tools/scripts/netns_hosts.sh --relay). This kernel has no netem, so nothing in the kernel can
// hold a packet back; instead a host's link is cut in two and this relay joins the halves: every
// frame that arrives on one side is sent out of the other once it has been held `delay`, in the
// order it arrived (a timed FIFO per direction). The delay applies to each direction, so it adds
// twice itself to a round trip.
//
// Frames are read and written with AF_PACKET raw sockets carrying the kernel's virtio-net header
// (PACKET_VNET_HDR): a TCP segment the host's veth hands over unsegmented (TSO, up to 64 KiB) or
// with its checksum left to the device goes out of the other side the same way, so no offload
// needs switching off. PACKET_IGNORE_OUTGOING keeps the relay from reading its own sends.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ddpkit::jobs {

struct RelayConfig {
  std::string side_a, side_b;  // interfaces in this network namespace, up, without addresses
  absl::Duration delay;        // each frame is held this long, each way
  // A spike: frames arriving from `spike_at` (after the start) for `spike_for` are held `spike`
  // more. Zero `spike`: none.
  absl::Duration spike, spike_at, spike_for;
  // When not empty: a file holding the delay in milliseconds, read again on SIGUSR1 (how
  // netns_hosts.sh's `fault HOST delay MS` changes a running relay's delay).
  std::string control_file;
  // Per direction; a frame that would queue more is dropped, as a full switch queue drops.
  int64_t max_queued_bytes = int64_t{64} << 20;
  // Each side's socket receive buffer: what arrives while the relay is not running (it shares
  // the cores with the hosts' processes). The kernel's default, about 200 KiB, is 170 us of a
  // 10 Gb/s link: a relay descheduled longer dropped 5-10% of a training's TCP segments.
  int socket_buffer_bytes = 32 << 20;
};

struct RelayDirection {
  int64_t frames = 0, bytes = 0;  // forwarded
  int64_t dropped = 0;            // queue full, or larger than a frame can be
  // The kernel's: frames its socket buffer had no room for, the relay not reading fast enough.
  int64_t socket_dropped = 0;
  int64_t send_errors = 0;  // the far side refused it (e.g. its link is down)
};

struct RelayStats {
  RelayDirection a_to_b, b_to_a;
};

// Opens both sides, calls `ready`, and forwards until SIGTERM or SIGINT (then returns what it
// forwarded). PermissionDenied without CAP_NET_RAW; NotFound for a missing interface;
// InvalidArgument for a control file that does not hold a delay.
absl::StatusOr<RelayStats> RunRelay(const RelayConfig& config, const std::function<void()>& ready);

}  // namespace ddpkit::jobs
