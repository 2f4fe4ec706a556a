// The first step of reading a PyTorch profiler trace (torch_profiler.h): its JSON checked and
// reduced to the complete ("X") events, sorted by start, each file's times from its own 0.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace ddpkit::torch_formats {

struct TorchEvent {
  std::string name;
  double start_us = 0, end_us = 0;
};

struct TorchRankEvents {
  int rank = -1;       // from distributedInfo; -1 when the file does not say
  int world_size = 0;  // likewise, 0
  std::string backend;
  std::vector<TorchEvent> events;  // by start, then longest first (a parent before its children)
};

// InvalidArgument naming `what` (one line) when `json` is not a PyTorch profiler trace of a DDP
// job: not a Chrome trace, a ddpkit trace, an event with a missing or negative time, or no
// `DistributedDataParallel.forward`.
absl::StatusOr<TorchRankEvents> TorchEventsOf(const nlohmann::json& json, const std::string& what);

}  // namespace ddpkit::torch_formats
