// Faults on the wire (`ddpkit chaos --faults`): each trial brings up one test host per rank
// (network namespaces on a bridge, made by tools/scripts/netns_hosts.sh), starts `ddpkit launch
// --nnodes N --node-rank k` inside host k, and at a random moment breaks one host's link: cut
// (link-down), partitioned (nftables drops everything), lossy (nftables drops a random share),
// flapping (down and up every second), or slow (a delay spike: the host's link runs through
// `ddpkit relay`, which holds every frame --spike-ms more for a while). A clear ending is one of:
//   - the job completes, rank 0's final weights bitwise equal to the same job's over loopback
//     (also after --max-restarts resumed it from its last checkpoint);
//   - every launcher exits non-zero, no rank crashed, and every rank on the other hosts printed
//     an error naming the unreachable rank and the collective (or rendezvous) it failed in.
// The kernel has no netem, hence the relay (tools/jobs/relay/packet_relay.h) for the delay.
#pragma once

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "tools/jobs/chaos/chaos.h"

namespace ddpkit::jobs {

struct WirePlan {
  std::string job;  // train | join
  int hosts = 2;    // one rank on each
  std::string fault{};
  int victim_host = 0;
  double delay_s = 0;  // from the launchers' start to the fault
};

// The job of a plan run over loopback, with no fault: where rank 0 saved its final weights (what
// every completed trial of that job must equal bitwise), and how long it took.
struct CleanRun {
  std::string weights;
  absl::Duration took;
};

// One trial; `clean` is the same job's clean run (RunClean).
ChaosTrial RunWireTrial(const ChaosConfig& config, const WirePlan& plan, int index,
                        const std::string& mark, const CleanRun& clean);

// Runs the job of `plan` over loopback (`ddpkit launch --standalone`).
absl::StatusOr<CleanRun> RunClean(const ChaosConfig& config, const WirePlan& plan);

// Whether this machine can make the test hosts: OK, or FailedPrecondition with the script's
// one line saying why not.
absl::Status CheckHostsAvailable(const ChaosConfig& config);

}  // namespace ddpkit::jobs
