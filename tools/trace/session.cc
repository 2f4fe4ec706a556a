#include "tools/trace/session.h"

#include "absl/strings/match.h"
#include "autograd/base/error.h"

namespace ddpkit::trace {

TraceSession::TraceSession(std::string path, std::string job, const comm::WorldSpec& world)
    : path_(std::move(path)), job_(std::move(job)), world_(world), local_clock_(LocalClock()) {
  file_.job = job_;
  file_.backend = std::string(comm::BackendName(world.backend));
}

std::string TraceSession::RankPath(const std::string& path, int rank) {
  const std::string stem = absl::EndsWith(path, ".json") ? path.substr(0, path.size() - 5) : path;
  return StrCat(stem, ".rank", rank, ".json");
}

absl::StatusOr<TraceRecorder*> TraceSession::BeginRank(comm::ProcessGroup& group,
                                                       TraceCapacity capacity) {
  if (!active()) return nullptr;
  JobClock clock = local_clock_;
  if (!comm::InfoOf(world_.backend).ranks_share_process) {
    DDPKIT_ASSIGN_OR_RETURN(clock, AlignClocks(group));
  }
  auto recorder = std::make_unique<TraceRecorder>(group.rank(), clock.epoch, capacity.compute,
                                                  capacity.collectives);
  TraceRecorder* raw = recorder.get();
  {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t slot = comm::InfoOf(world_.backend).ranks_share_process ? group.rank() : 0;
    if (recorders_.size() <= slot) {
      recorders_.resize(slot + 1);
      clocks_.resize(slot + 1);
    }
    recorders_[slot] = std::move(recorder);
    clocks_[slot] = clock;
    file_.world_size = group.size();
  }
  group.SetListener(raw);
  return raw;
}

void TraceSession::EndRank(comm::ProcessGroup& group, const reducer::DdpLoggingData& ddp) {
  if (!active()) return;
  group.SetListener(nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  const size_t slot = comm::InfoOf(world_.backend).ranks_share_process ? group.rank() : 0;
  if (slot >= recorders_.size() || recorders_[slot] == nullptr) return;
  file_.ranks.push_back({.trace = recorders_[slot]->Take(), .clock = clocks_[slot], .ddp = ddp});
}

absl::StatusOr<std::vector<std::string>> TraceSession::Write() {
  if (!active()) return std::vector<std::string>{};
  std::lock_guard<std::mutex> lock(mu_);
  std::sort(
      file_.ranks.begin(), file_.ranks.end(),
      [](const RankTraceData& a, const RankTraceData& b) { return a.trace.rank < b.trace.rank; });
  const bool per_rank = !comm::InfoOf(world_.backend).ranks_share_process;
  const std::string path =
      per_rank && !file_.ranks.empty() ? RankPath(path_, file_.ranks[0].trace.rank) : path_;
  DDPKIT_RETURN_IF_ERROR(WriteTraceFile(file_, path, /*distributed_info=*/per_rank));
  return std::vector<std::string>{path};
}

}  // namespace ddpkit::trace
