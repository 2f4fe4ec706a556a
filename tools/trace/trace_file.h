// A job's trace as a file: the Chrome trace event JSON that Perfetto (ui.perfetto.dev) and
// chrome://tracing open (parse_trace.h reads it back, for `ddpkit trace stats|svg|merge`).
//
// Layout (docs/inspect.md has a picture):
//  * pid = rank ("rank r"); tid 0 "compute", tid 1 "communication"; ts and dur in microseconds
//    since the job's epoch, one clock for every rank (clock_sync.h);
//  * cat "phase": X spans forward, backward, finalize, optimizer, shadow, and "unused search"
//    (find_unused_parameters' graph search, inside forward) — args.iteration;
//  * cat "hook": an instant per gradient hook, named by the parameter — args {index, bucket,
//    iteration};
//  * cat "collective": an X span per collective on the communication lane, from the moment the
//    communication thread started it to its end — args {seq, op, dtype, count, bytes, purpose,
//    bucket, iteration, shadow, queued_us, ok};
//  * instants: "bucket b ready|launched|reduced" (cat "bucket", args.event), "rebuild" and
//    "no_sync" (cat "ddp"), the job's markers (cat "marker");
//  * otherData.ddpkit: the job, its id, world size, backend, and per rank its clock offset, the
//    parameters' names and DDP's bucket plans; per-rank files also carry HTA's distributedInfo.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "reducer/ddp_logging.pb.h"
#include "tools/trace/clock_sync.h"
#include "tools/trace/recorder.h"

namespace ddpkit::trace {

// One rank's part of the file: its records, its clock, and DDP's state for naming them.
struct RankTraceData {
  RankTrace trace;
  JobClock clock;
  reducer::DdpLoggingData ddp;  // the last DDP the rank traced (names, bucket plans)
};

struct TraceFile {
  std::string job;  // "train", "join", ...
  std::string backend;
  int world_size = 1;
  std::vector<RankTraceData> ranks;  // every rank (threads), or this process's one (gloo)
};

// The Chrome trace JSON. `distributed_info`: add HTA's top-level distributedInfo (a file of one
// rank of a multi-process job).
nlohmann::json ChromeTraceJson(const TraceFile& file, bool distributed_info);

// Writes ChromeTraceJson atomically.
absl::Status WriteTraceFile(const TraceFile& file, const std::string& path, bool distributed_info);

}  // namespace ddpkit::trace
