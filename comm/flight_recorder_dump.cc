#include "comm/flight_recorder_dump.h"

#include <cstdlib>
#include <filesystem>

#include "autograd/base/error.h"
#include "autograd/base/file_util.h"
#include "nlohmann/json.hpp"

namespace ddpkit::comm {
namespace {

// PyTorch's names for ops (after its "<backend>:" prefix) and dtypes.
std::string_view ProfilingOp(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return "all_reduce";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kAllgather: return "all_gather";
    case OpType::kAllgatherV: return "all_gather_v";
    case OpType::kReduceScatter: return "reduce_scatter";
    case OpType::kAllToAllV: return "all_to_all_v";
    case OpType::kBarrier: return "barrier";
  }
  return "?";
}

std::string_view TorchDtypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "Float";
    case DType::kFloat64: return "Double";
    case DType::kFloat16: return "Half";
    case DType::kBFloat16: return "BFloat16";
    case DType::kInt32: return "Int";
    case DType::kInt64: return "Long";
  }
  return "?";
}

// PyTorch's states are scheduled, started and completed; a failed collective is ddpkit's own.
std::string_view DumpState(FlightRecorder::State state) {
  switch (state) {
    case FlightRecorder::State::kQueued: return "scheduled";
    case FlightRecorder::State::kRunning: return "started";
    case FlightRecorder::State::kCompleted: return "completed";
    case FlightRecorder::State::kFailed: return "failed";
  }
  return "?";
}

nlohmann::json NanosOrNull(absl::Time t) {
  if (t == absl::Time()) return nullptr;
  return absl::ToUnixNanos(t);
}

nlohmann::json EntryJson(const FlightRecorder::Entry& e, const FlightRecorderDumpInfo& info) {
  const bool finished = e.finished != absl::Time();
  nlohmann::json entry = {
      {"record_id", e.record_id},
      {"pg_id", 0},
      {"process_group", nlohmann::json::array({"default", info.backend})},
      {"collective_seq_id", e.sequence_number},
      {"p2p_seq_id", 0},
      {"op_id", e.sequence_number},
      {"is_p2p", false},
      {"profiling_name", StrCat(info.backend, ":", ProfilingOp(e.op))},
      {"input_sizes", nlohmann::json::array({nlohmann::json::array({e.count})})},
      {"input_dtypes", nlohmann::json::array({TorchDtypeName(e.dtype)})},
      {"output_sizes", nlohmann::json::array({nlohmann::json::array({e.output_count})})},
      {"output_dtypes", nlohmann::json::array({TorchDtypeName(e.dtype)})},
      {"state", DumpState(e.state)},
      {"retired", finished},
      {"time_created_ns", absl::ToUnixNanos(e.queued)},
      {"time_discovered_started_ns", NanosOrNull(e.started)},
      {"time_discovered_completed_ns", NanosOrNull(e.finished)},
      {"duration_ms", nullptr},
      {"timeout_ms", absl::ToDoubleMilliseconds(info.timeout)},
      {"frames", nlohmann::json::array()},
      // ddpkit's own names beside PyTorch's, for reading the call back (`ddpkit fr analyze`).
      {"op", OpTypeName(e.op)},
      {"dtype", DTypeName(e.dtype)},
      {"reduce_op", ReduceOpName(e.reduce_op)},
      {"root", e.root},
      {"purpose", PurposeName(e.tag)},
      {"bucket", e.tag.bucket},
      {"shadow", e.tag.shadow},
  };
  if (finished && e.started != absl::Time()) {
    entry["duration_ms"] = absl::ToDoubleMilliseconds(e.finished - e.started);
  }
  return entry;
}

}  // namespace

std::string FlightRecorderDumpDirFromEnv() {
  const char* dir = std::getenv("DDPKIT_FR_DUMP_DIR");
  return dir == nullptr ? "" : dir;
}

std::string FlightRecorderDumpPath(const std::string& dir, int rank) {
  return StrCat(dir, "/ddpkit_fr.rank", rank, ".json");
}

std::string FlightRecorderJson(const std::vector<FlightRecorder::Entry>& entries,
                               const FlightRecorderDumpInfo& info) {
  nlohmann::json dump = {
      {"version", kFlightRecorderDumpVersion},
      {"rank", info.rank},
      {"world_size", info.world_size},
      {"backend", info.backend},
      {"reason", info.reason},
      {"dump_time_ns", absl::ToUnixNanos(absl::Now())},
      {"timeout_ms", absl::ToDoubleMilliseconds(info.timeout)},
      {"entries", nlohmann::json::array()},
  };
  for (const FlightRecorder::Entry& e : entries) dump["entries"].push_back(EntryJson(e, info));
  return dump.dump(1) + "\n";
}

absl::StatusOr<std::string> WriteFlightRecorderDump(
    const std::string& dir, const std::vector<FlightRecorder::Entry>& entries,
    const FlightRecorderDumpInfo& info) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::UnavailableError(
        StrCat("cannot create the flight-recorder dump folder '", dir, "': ", ec.message()));
  }
  const std::string path = FlightRecorderDumpPath(dir, info.rank);
  DDPKIT_RETURN_IF_ERROR(WriteFileAtomically(path, FlightRecorderJson(entries, info)));
  return path;
}

}  // namespace ddpkit::comm
