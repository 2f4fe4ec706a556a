// The network profile: one allreduce of S bytes on N ranks costs latency terms plus S over the
// bandwidth times the algorithm's factor (the alpha-beta model):
//   ring          2(N-1)·α + 2(N-1)/N · S/β
//   tree          2·ceil(log2 N)·α + 2 · S/β      (a pipelined double binary tree)
//   hierarchical  ring inside a node of G ranks (α_intra, β_intra), then a ring across the N/G
//                 nodes on each rank's 1/G shard (α, β): every rank drives its own NIC.
// A flat ring or tree spanning several nodes runs at the inter-node link's α and β.
// Measured profiles (`ddpkit bench allreduce --json`) are fitted to time = a + b·S per world
// size; other world sizes scale the largest one's fit as a ring.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ddpkit::jobs::sim {

struct LinearFit {
  double a_us = 0, b_us_per_byte = 0;
};

struct NetworkModel {
  std::string name;
  std::string algorithm = "ring";  // ring, tree, hierarchical
  double latency_us = 5;           // α: inter-node (or the only) link, per step
  double gbytes_per_s = 12.5;      // β: per rank, GB/s (100 Gb/s)
  int ranks_per_node = 1;          // G
  double intra_latency_us = 2;
  double intra_gbytes_per_s = 150;
  std::map<int, LinearFit> measured;  // world size -> fitted allreduce time
  std::string source;                 // where the figures come from
  double time_scale = 1;              // every allreduce's time times this (a replay's pace)

  // One allreduce of `bytes` on `world` ranks, in microseconds (0 on one rank).
  double AllreduceUs(double bytes, int world) const {
    return time_scale * UnscaledUs(bytes, world);
  }

 private:
  double UnscaledUs(double bytes, int world) const;
};

// --network: a preset ("dgx-a100-ib200", "v100-nvlink-ib100", "eth100", "eth10"), or
// "key=value,..." over one (algo, latency_us, GBps, gbps, node, intra_latency_us, intra_GBps;
// gbps in gigabits), "measured=FILE[+FILE...]" (bench allreduce --json reports), or
// "trace=FILE": the bucket allreduces of a ddpkit --trace, timed as they ran inside DDP.
absl::StatusOr<NetworkModel> ParseNetwork(const std::string& spec);

// time_us = a + b·bytes over (bytes, time_us) points by least squares; where the intercept would
// fall below zero, the best line through the origin (a = 0), the slope never below zero.
LinearFit LeastSquares(const std::vector<std::pair<double, double>>& points);

// The fit of one `ddpkit bench allreduce --json` report: {world size, fit}.
absl::StatusOr<std::pair<int, LinearFit>> FitAllreduceReport(const std::string& json_text);

}  // namespace ddpkit::jobs::sim
