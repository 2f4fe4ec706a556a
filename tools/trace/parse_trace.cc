#include "tools/trace/parse_trace.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

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

// Iterations, buckets, parameters, ranks and world sizes a trace may number, and its byte counts
// and sequence numbers: far past any run's, and small enough that a few runs numbered one after
// another (runs.h, which checks) stay inside an int.
constexpr int64_t kMaxNumber = int64_t{1} << 28, kMaxCount = int64_t{1} << 53;

// An integer field, absent or null: `fallback`. Anything but an integer in [lo, hi] throws, for
// ParseTrace to name: nlohmann's get<int>() of 1e20 is a float cast out of range, undefined.
int64_t GetInt(const json& object, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (it->is_number_unsigned() && it->get<uint64_t>() <= static_cast<uint64_t>(hi)) {
    const auto v = static_cast<int64_t>(it->get<uint64_t>());
    if (v >= lo) return v;
  } else if (it->is_number_integer() && !it->is_number_unsigned()) {
    const auto v = it->get<int64_t>();
    if (v >= lo && v <= hi) return v;
  }
  throw std::out_of_range(StrCat("\"", key, "\" is ", it->dump().substr(0, 40),
                                 ", not an integer from ", lo, " to ", hi));
}

int GetNumber(const json& object, const char* key, int fallback) {
  return static_cast<int>(GetInt(object, key, fallback, -1, kMaxNumber));
}

TraceItem ItemOf(const json& e) {
  const json empty = json::object();
  const json& args = e.contains("args") ? e["args"] : empty;
  TraceItem item;
  item.name = Get<std::string>(e, "name", "");
  item.start_us = Get<double>(e, "ts", 0);
  item.end_us = item.start_us + Get<double>(e, "dur", 0);
  item.iteration = GetNumber(args, "iteration", -1);
  item.micro_batch = GetNumber(args, "micro_batch", -1);
  item.bucket = GetNumber(args, "bucket", -1);
  item.param = GetNumber(args, "index", -1);
  item.purpose = Get<std::string>(args, "purpose", "");
  item.op = Get<std::string>(args, "op", "");
  item.bytes = GetInt(args, "bytes", 0, 0, kMaxCount);
  item.seq = GetInt(args, "seq", -1, -1, kMaxCount);
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
  constexpr double kMaxUs = 1e15;  // 31 years from the job's epoch
  for (double us : {item.start_us, item.end_us, item.queued_us}) {
    if (!(std::abs(us) <= kMaxUs)) return StrCat(event, " has a time past 10^15 us, ", us);
  }
  if (item.end_us < item.start_us) return StrCat(event, " has a negative duration");
  return "";
}

// One event into its rank's lists (metadata, with no cat or pid, skipped); "" or why not.
std::string AddEvent(const json& e, size_t index, TraceView& view) {
  const std::string cat = Get<std::string>(e, "cat", "");
  if (cat.empty() || !e.contains("pid")) return "";
  const int pid = static_cast<int>(GetInt(e, "pid", 0, -1, kMaxNumber));
  TraceItem item = ItemOf(e);
  const std::string bad = BadEvent(item, pid, view.world_size, index);
  if (!bad.empty()) {
    return StrCat(bad,
                  "; no --trace run writes one (was the file edited?): write it again with "
                  "--trace");
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
  return "";
}

}  // namespace

absl::StatusOr<TraceView> ParseTrace(const json& trace, const std::string& what) {
  auto invalid = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat(what, ": ", why));
  };
  DDPKIT_RETURN_IF_ERROR(CheckIsDdpkitTrace(trace, what));
  const json& ddpkit = trace["otherData"]["ddpkit"];
  const json& events = trace["traceEvents"];
  TraceView view;
  size_t index = 0;  // the event read, for the error
  try {
    view.job = Get<std::string>(ddpkit, "job", "");
    view.backend = Get<std::string>(ddpkit, "backend", "");
    view.world_size = static_cast<int>(GetInt(ddpkit, "world_size", 1, 1, kMaxNumber));
    view.job_id = std::stoull(Get<std::string>(ddpkit, "job_id", "0"));
    view.other_data = ddpkit;
    for (; index < events.size(); ++index) {
      const std::string bad = AddEvent(events[index], index, view);
      if (!bad.empty()) return invalid(bad);
    }
  } catch (const std::exception& e) {  // nlohmann's, GetInt's and stoull's
    return invalid(index < events.size() ? StrCat("malformed event ", index, ": ", e.what())
                                         : StrCat("malformed otherData.ddpkit: ", e.what()));
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
