#include "tools/trace/parse_trace.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/escaping.h"
#include "autograd/base/error.h"
#include "autograd/base/file_util.h"

namespace ddpkit::trace {

using nlohmann::json;

namespace {

template <typename T>
T Get(const json& object, const char* key, T fallback) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  return it->get<T>();
}

TraceItem ItemOf(const json& e) {
  const json empty = json::object();
  const json& args = e.contains("args") ? e["args"] : empty;
  TraceItem item;
  item.name = Get<std::string>(e, "name", "");
  item.start_us = Get<double>(e, "ts", 0);
  item.end_us = item.start_us + Get<double>(e, "dur", 0);
  item.iteration = Get<int>(args, "iteration", -1);
  item.micro_batch = Get<int>(args, "micro_batch", -1);
  item.bucket = Get<int>(args, "bucket", -1);
  item.param = Get<int>(args, "index", -1);
  item.purpose = Get<std::string>(args, "purpose", "");
  item.op = Get<std::string>(args, "op", "");
  item.bytes = Get<int64_t>(args, "bytes", 0);
  item.seq = Get<int64_t>(args, "seq", -1);
  item.queued_us = Get<double>(args, "queued_us", item.start_us);
  item.shadow = Get<bool>(args, "shadow", false);
  item.ok = Get<bool>(args, "ok", true);
  item.event = Get<std::string>(args, "event", "");
  return item;
}

RankView& RankOf(TraceView& view, int rank) {
  for (RankView& r : view.ranks) {
    if (r.rank == rank) return r;
  }
  RankView added;
  added.rank = rank;
  view.ranks.push_back(std::move(added));
  return view.ranks.back();
}

// Whether `trace` has the shape WriteTraceFile gives it; InvalidArgument naming `what` if not.
absl::Status CheckIsDdpkitTrace(const json& trace, const std::string& what) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
    return absl::InvalidArgumentError(StrCat(what, ": not a Chrome trace (no traceEvents array)"));
  }
  if (!trace.contains("otherData") || !trace["otherData"].is_object() ||
      !trace["otherData"].contains("ddpkit") || !trace["otherData"]["ddpkit"].is_object()) {
    return absl::InvalidArgumentError(
        StrCat(what, ": not a ddpkit trace (no otherData.ddpkit); write one with --trace"));
  }
  return absl::OkStatus();
}

// Why event `index` (rank `pid`) cannot be on a trace of `world_size` ranks, or "" if it can: the
// readers after this one (stats, the timeline, the simulator's calibration) rely on ranks the job
// had and on times that are finite and do not run backwards.
std::string BadEvent(const TraceItem& item, int pid, int world_size, size_t index) {
  const std::string event =
      StrCat("event ", index, " (\"", absl::CEscape(item.name.substr(0, 80)), "\")");
  if (pid < 0 || pid >= world_size) {
    return StrCat(event, " is on rank ", pid, ", outside the job's world size ", world_size);
  }
  if (!std::isfinite(item.start_us) || !std::isfinite(item.end_us) ||
      !std::isfinite(item.queued_us)) {
    return StrCat(event, " has a time that is not a finite number");
  }
  if (item.end_us < item.start_us) return StrCat(event, " has a negative duration");
  return "";
}

}  // namespace

absl::StatusOr<TraceView> ParseTrace(const json& trace, const std::string& what) {
  auto invalid = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat(what, ": ", why));
  };
  DDPKIT_RETURN_IF_ERROR(CheckIsDdpkitTrace(trace, what));
  const json* ddpkit = &trace["otherData"]["ddpkit"];
  TraceView view;
  try {
    view.job = Get<std::string>(*ddpkit, "job", "");
    view.backend = Get<std::string>(*ddpkit, "backend", "");
    view.world_size = Get<int>(*ddpkit, "world_size", 1);
    view.job_id = std::stoull(Get<std::string>(*ddpkit, "job_id", "0"));
    if (view.world_size < 1) return invalid(StrCat("world size ", view.world_size, " is below 1"));
    view.other_data = *ddpkit;
    const json& events = trace["traceEvents"];
    for (size_t index = 0; index < events.size(); ++index) {
      const json& e = events[index];
      const std::string cat = Get<std::string>(e, "cat", "");
      if (cat.empty() || !e.contains("pid")) continue;  // metadata
      const int pid = e["pid"].get<int>();
      TraceItem item = ItemOf(e);
      const std::string bad = BadEvent(item, pid, view.world_size, index);
      if (!bad.empty()) {
        return invalid(StrCat(bad,
                              "; no --trace run writes one (was the file edited?): write it "
                              "again with --trace"));
      }
      RankView& rank = RankOf(view, pid);
      if (cat == "phase") {
        rank.phases.push_back(std::move(item));
      } else if (cat == "hook") {
        rank.hooks.push_back(std::move(item));
      } else if (cat == "collective") {
        rank.collectives.push_back(std::move(item));
      } else {
        rank.instants.push_back(std::move(item));
      }
    }
  } catch (const json::exception& e) {
    return invalid(StrCat("malformed trace event: ", e.what()));
  } catch (const std::exception& e) {
    return invalid(StrCat("malformed trace: ", e.what()));
  }
  std::sort(view.ranks.begin(), view.ranks.end(),
            [](const RankView& a, const RankView& b) { return a.rank < b.rank; });
  for (RankView& r : view.ranks) {
    std::sort(r.collectives.begin(), r.collectives.end(),
              [](const TraceItem& a, const TraceItem& b) { return a.seq < b.seq; });
  }
  return view;
}

absl::StatusOr<json> ReadTraceJson(const std::string& path) {
  DDPKIT_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  json trace = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (trace.is_discarded()) {
    return absl::InvalidArgumentError(StrCat(path, ": not JSON (a Chrome trace is JSON)"));
  }
  DDPKIT_RETURN_IF_ERROR(CheckIsDdpkitTrace(trace, path));
  return trace;
}

absl::StatusOr<TraceView> ReadTraceFile(const std::string& path) {
  DDPKIT_ASSIGN_OR_RETURN(json trace, ReadTraceJson(path));
  return ParseTrace(trace, path);
}

}  // namespace ddpkit::trace
