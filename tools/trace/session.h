// Tracing one job (`--trace FILE`): each rank records into its own TraceRecorder; when every
// rank is done the file is written — a threads world's ranks into FILE together, each process of
// a gloo job into FILE.rank<r>.json (FILE minus ".json", then ".rank<r>.json"), which
// `ddpkit trace merge` combines.
//
//   TraceSession trace(config.trace_path, "train", world);      // inactive for an empty path
//   ...on every rank:
//   DDPKIT_ASSIGN_OR_RETURN(TraceRecorder* recorder, trace.BeginRank(group, capacity));
//   if (recorder) ddp->reducer().SetTraceObserver(recorder);    // null when inactive
//   ...the loop, with recorder->SetIteration(t) and ScopedSpan(recorder, kind)...
//   trace.EndRank(group, ddp->LoggingData());
//   ...after every rank:
//   DDPKIT_RETURN_IF_ERROR(trace.Write());
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/world/world.h"
#include "tools/trace/trace_file.h"

namespace ddpkit::trace {

// Records kept per rank; more are dropped and counted in the file.
struct TraceCapacity {
  size_t compute = 1 << 16;
  size_t collectives = 1 << 14;
};

class TraceSession {
 public:
  TraceSession(std::string path, std::string job, const comm::WorldSpec& world);
  bool active() const { return !path_.empty(); }

  // Collective when active (gloo: aligns the clocks). Attaches the rank's recorder to `group`
  // and returns it; null when inactive.
  absl::StatusOr<TraceRecorder*> BeginRank(comm::ProcessGroup& group, TraceCapacity capacity);
  // Detaches the recorder and keeps its records, named with DDP's state.
  void EndRank(comm::ProcessGroup& group, const reducer::DdpLoggingData& ddp);
  // Writes the file(s); returns their paths (none when inactive).
  absl::StatusOr<std::vector<std::string>> Write();

  // Where rank r of a multi-process job writes: "t.json" -> "t.rank<r>.json".
  static std::string RankPath(const std::string& path, int rank);

 private:
  const std::string path_;
  const std::string job_;
  const comm::WorldSpec world_;
  const JobClock local_clock_;  // the threads world's one clock
  std::mutex mu_;
  // Guarded by mu_:
  std::vector<std::unique_ptr<TraceRecorder>> recorders_;
  std::vector<JobClock> clocks_;
  TraceFile file_;
};

}  // namespace ddpkit::trace
