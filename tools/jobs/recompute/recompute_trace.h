// `ddpkit recompute --trace PATH`: where each training run's trace goes, and the picture that
// puts the static_graph and the no_sync + fused allreduce timelines one above the other.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "comm/backend.h"
#include "tools/jobs/recompute/recompute_report.pb.h"

namespace ddpkit::jobs {

// "t.json", "static_graph" -> "t.static_graph.json"; "" for no trace.
std::string RunTracePath(const std::string& trace_path, const std::string& run);
// "t.json" -> "t.svg".
std::string SideBySidePath(const std::string& trace_path);

// Draws iterations 2 and 3 of both runs (after the bucket rebuild) on one time scale into
// SideBySidePath. Needs every rank's records in one file, so only a threads world draws it; a
// gloo job's files are merged first (`ddpkit trace merge`), then drawn with `ddpkit trace svg`.
absl::Status WriteSideBySideTimelines(const std::string& trace_path, comm::Backend backend,
                                      RecomputeReport& report);

}  // namespace ddpkit::jobs
