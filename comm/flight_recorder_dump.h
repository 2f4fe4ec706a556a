// Flight-recorder dumps: on a failed or timed-out collective each rank writes its recorder as
// JSON, DIR/ddpkit_fr.rank<r>.json, with PyTorch's field names where they exist (record_id,
// collective_seq_id, profiling_name, input_sizes, input_dtypes, state, time_created_ns,
// time_discovered_started_ns, time_discovered_completed_ns, duration_ms, timeout_ms) and ddpkit's
// own beside them (purpose, bucket, shadow, reduce_op, root). `ddpkit fr analyze DIR` matches
// them across ranks.
//
// DIR is ProcessGroupOptions::fr_dump_dir, from DDPKIT_FR_DUMP_DIR by default (no dumps when
// empty; the command line defaults it to ./ddpkit_fr).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/flight_recorder.h"

namespace ddpkit::comm {

inline constexpr char kFlightRecorderDumpVersion[] = "ddpkit-fr-1";

struct FlightRecorderDumpInfo {
  int rank = 0;
  int world_size = 1;
  std::string backend;
  std::string reason;  // why this rank dumped: its error, or that a peer failed
  absl::Duration timeout = absl::ZeroDuration();
};

// DDPKIT_FR_DUMP_DIR, or "" when unset.
std::string FlightRecorderDumpDirFromEnv();

// "<dir>/ddpkit_fr.rank<r>.json".
std::string FlightRecorderDumpPath(const std::string& dir, int rank);

// The dump as JSON text.
std::string FlightRecorderJson(const std::vector<FlightRecorder::Entry>& entries,
                               const FlightRecorderDumpInfo& info);

// Writes the dump atomically into `dir` (created if missing); returns its path.
absl::StatusOr<std::string> WriteFlightRecorderDump(
    const std::string& dir, const std::vector<FlightRecorder::Entry>& entries,
    const FlightRecorderDumpInfo& info);

}  // namespace ddpkit::comm
