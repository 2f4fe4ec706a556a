// A trace as `ddpkit trace stats|svg` read it: per rank, the phases, gradient hooks, collectives
// and instants of each iteration, on one clock, in microseconds. ddpkit's own trace files
// (parse_trace.h) and PyTorch's profiler traces (torch_profiler.h) are both read into this form,
// so the same figures and pictures come out of either.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace ddpkit::trace {

// A span or instant as the file holds it (times in microseconds on the job's clock).
struct TraceItem {
  std::string name;
  double start_us = 0, end_us = 0;  // equal for instants
  int iteration = -1;
  int micro_batch = -1;
  int bucket = -1;
  int param = -1;
  // Collectives only:
  std::string purpose{};
  std::string op{};
  int64_t bytes = 0;
  int64_t seq = -1;
  double queued_us = 0;
  bool shadow = false;
  bool ok = true;
  std::string event{};  // bucket instants: "ready", "launched" or "reduced"
};

struct RankView {
  int rank = 0;
  std::vector<TraceItem> phases;  // forward, backward, finalize, optimizer, shadow
  std::vector<TraceItem> hooks;
  std::vector<TraceItem> collectives;  // in sequence order
  std::vector<TraceItem> instants;     // bucket ready/launched/reduced, rebuild, no_sync, markers
};

struct TraceView {
  std::string job;
  std::string backend;
  int world_size = 1;
  uint64_t job_id = 0;
  std::vector<RankView> ranks;  // by rank; only the ranks the file holds
  nlohmann::json other_data;    // otherData.ddpkit as written
};

}  // namespace ddpkit::trace
