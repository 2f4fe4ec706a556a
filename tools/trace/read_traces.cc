#include "tools/trace/read_traces.h"

#include <algorithm>
#include <filesystem>

#include "autograd/base/error.h"
#include "autograd/base/file_util.h"
#include "tools/trace/parse_trace.h"
#include "tools/trace/runs.h"

namespace ddpkit::trace {
namespace {

using nlohmann::json;

absl::StatusOr<json> ReadJson(const std::string& path) {
  DDPKIT_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return absl::InvalidArgumentError(StrCat(path, ": not JSON (a Chrome trace is JSON)"));
  }
  return parsed;
}

// A folder's Chrome traces that are not ddpkit's, by name.
absl::StatusOr<std::vector<TorchTraceJson>> FolderTraces(const std::string& dir) {
  std::vector<std::string> paths;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json") {
      paths.push_back(entry.path().string());
    }
  }
  if (error) return absl::NotFoundError(StrCat(dir, ": ", error.message()));
  std::sort(paths.begin(), paths.end());
  std::vector<TorchTraceJson> traces;
  for (const std::string& path : paths) {
    DDPKIT_ASSIGN_OR_RETURN(json parsed, ReadJson(path));
    if (IsForeignChromeTrace(parsed)) traces.push_back({path, std::move(parsed)});
  }
  if (traces.empty()) {
    return absl::InvalidArgumentError(
        StrCat(dir, ": holds no PyTorch profiler traces (*.json Chrome traces)"));
  }
  return traces;
}

// ddpkit's own trace (trace_file.h), not a Chrome trace from elsewhere.
bool IsDdpkitTrace(const json& j) {
  return !IsForeignChromeTrace(j) && j.is_object() && j.contains("otherData");
}

}  // namespace

absl::StatusOr<TraceView> ReadTraces(const std::vector<std::string>& paths, const TorchPlan* plan) {
  if (paths.empty()) return absl::InvalidArgumentError("no trace files given");
  if (paths.size() == 1 && std::filesystem::is_directory(paths[0])) {
    DDPKIT_ASSIGN_OR_RETURN(std::vector<TorchTraceJson> traces, FolderTraces(paths[0]));
    return TorchTracesView(traces, plan);
  }
  std::vector<TorchTraceJson> traces;
  for (const std::string& path : paths) {
    DDPKIT_ASSIGN_OR_RETURN(json parsed, ReadJson(path));
    traces.push_back({path, std::move(parsed)});
  }
  const auto ddpkits = [](const TorchTraceJson& t) { return IsDdpkitTrace(t.json); };
  if (traces.size() == 1 && ddpkits(traces[0])) return ParseTrace(traces[0].json, paths[0]);
  if (std::all_of(traces.begin(), traces.end(), ddpkits)) {  // separate runs, one after another
    std::vector<TraceView> runs;
    for (const TorchTraceJson& t : traces) {
      DDPKIT_ASSIGN_OR_RETURN(TraceView run, ParseTrace(t.json, t.name));
      runs.push_back(std::move(run));
    }
    return RunsOneAfterAnother(std::move(runs), paths);
  }
  return TorchTracesView(traces, plan);
}

absl::StatusOr<TorchPlan> ReadTorchPlan(const std::string& path) {
  DDPKIT_ASSIGN_OR_RETURN(json parsed, ReadJson(path));
  return ParseTorchPlan(parsed, path);
}

}  // namespace ddpkit::trace
