#include "tools/trace/trace_file.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "autograd/base/error.h"
#include "autograd/base/file_util.h"

namespace ddpkit::trace {
namespace {

using nlohmann::json;

constexpr int kComputeLane = 0, kCommLane = 1;

double Us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

std::string_view PhaseName(ComputeKind kind) {
  switch (kind) {
    case ComputeKind::kForward: return "forward";
    case ComputeKind::kBackward: return "backward";
    case ComputeKind::kFinalize: return "finalize";
    case ComputeKind::kOptimizer: return "optimizer";
    case ComputeKind::kShadow: return "shadow";
    case ComputeKind::kUnusedSearch: return "unused search";
    default: return "";
  }
}

std::string_view BucketEventName(ComputeKind kind) {
  switch (kind) {
    case ComputeKind::kBucketReady: return "ready";
    case ComputeKind::kBucketLaunched: return "launched";
    case ComputeKind::kBucketReduced: return "reduced";
    default: return "";
  }
}

// Parameter names by index, from DDP's logged plan.
std::vector<std::string> ParamNames(const reducer::DdpLoggingData& ddp) {
  std::vector<std::string> names(ddp.num_parameter_tensors());
  for (const reducer::BucketInfo& b : ddp.initial_buckets()) {
    for (int i = 0; i < b.param_indices_size() && i < b.param_names_size(); ++i) {
      const int index = b.param_indices(i);
      if (index >= 0 && index < static_cast<int>(names.size())) names[index] = b.param_names(i);
    }
  }
  return names;
}

json Plan(const google::protobuf::RepeatedPtrField<reducer::BucketInfo>& buckets) {
  json plan = json::array();
  for (const reducer::BucketInfo& b : buckets) {
    plan.push_back(
        {{"params", std::vector<int>(b.param_indices().begin(), b.param_indices().end())},
         {"bytes", b.bytes()}});
  }
  return plan;
}

json Metadata(int rank, std::string_view name, json args, int tid = -1) {
  json e = {{"ph", "M"}, {"name", name}, {"pid", rank}, {"args", std::move(args)}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

json Span(int rank, int tid, std::string_view name, std::string_view cat, int64_t start_ns,
          int64_t end_ns, json args) {
  return {{"ph", "X"},
          {"name", name},
          {"cat", cat},
          {"pid", rank},
          {"tid", tid},
          {"ts", Us(start_ns)},
          {"dur", Us(std::max<int64_t>(0, end_ns - start_ns))},
          {"args", std::move(args)}};
}

json Instant(int rank, std::string_view name, std::string_view cat, int64_t at_ns, json args,
             std::string_view scope = "t") {
  return {{"ph", "i"},           {"name", name}, {"cat", cat},      {"pid", rank},
          {"tid", kComputeLane}, {"s", scope},   {"ts", Us(at_ns)}, {"args", std::move(args)}};
}

// The backward span ends where finalize starts, so the two lie side by side on the lane.
int64_t BackwardEnd(const ComputeEvent& backward, const std::vector<ComputeEvent>& compute) {
  for (const ComputeEvent& r : compute) {
    if (r.kind == ComputeKind::kFinalize && r.start_ns >= backward.start_ns &&
        r.start_ns <= backward.end_ns) {
      return r.start_ns;
    }
  }
  return backward.end_ns;
}

void AddCompute(const RankTraceData& data, const std::vector<std::string>& names, json& events) {
  const int rank = data.trace.rank;
  for (const ComputeEvent& r : data.trace.compute) {
    json args = {{"iteration", r.iteration}};
    if (r.micro_batch >= 0) args["micro_batch"] = r.micro_batch;
    switch (r.kind) {
      case ComputeKind::kBackward:
        events.push_back(Span(rank, kComputeLane, "backward", "phase", r.start_ns,
                              BackwardEnd(r, data.trace.compute), args));
        break;
      case ComputeKind::kForward:
      case ComputeKind::kFinalize:
      case ComputeKind::kOptimizer:
      case ComputeKind::kShadow:
      case ComputeKind::kUnusedSearch:
        events.push_back(
            Span(rank, kComputeLane, PhaseName(r.kind), "phase", r.start_ns, r.end_ns, args));
        break;
      case ComputeKind::kHook: {
        args["index"] = r.param;
        args["bucket"] = r.bucket;
        const bool named =
            r.param >= 0 && r.param < static_cast<int>(names.size()) && !names[r.param].empty();
        events.push_back(Instant(rank, named ? names[r.param] : StrCat("parameter ", r.param),
                                 "hook", r.start_ns, args));
        break;
      }
      case ComputeKind::kBucketReady:
      case ComputeKind::kBucketLaunched:
      case ComputeKind::kBucketReduced: {
        const std::string_view event = BucketEventName(r.kind);
        args["bucket"] = r.bucket;
        args["event"] = event;
        events.push_back(
            Instant(rank, StrCat("bucket ", r.bucket, " ", event), "bucket", r.start_ns, args));
        break;
      }
      case ComputeKind::kRebuild:
        events.push_back(Instant(rank, "rebuild", "ddp", r.start_ns, args, "p"));
        break;
      case ComputeKind::kNoSync:
        events.push_back(Instant(rank, "no_sync", "ddp", r.start_ns, args));
        break;
      case ComputeKind::kMarker:
        events.push_back(
            Instant(rank, data.trace.labels.at(r.label), "marker", r.start_ns, args, "p"));
        break;
    }
  }
}

std::string CollectiveName(const CollectiveEvent& c) {
  std::string name = absl::AsciiStrToLower(std::string(comm::OpTypeName(c.op)));
  if (c.tag.bucket >= 0) return StrCat(name, " bucket ", c.tag.bucket);
  if (!c.tag.purpose.empty()) StrAppend(&name, " ", c.tag.purpose);
  return name;
}

void AddCollectives(const RankTraceData& data, json& events) {
  const int rank = data.trace.rank;
  for (const CollectiveEvent& c : data.trace.collectives) {
    if (c.started_ns < 0) continue;  // never ran (the group broke first)
    json args = {{"seq", c.sequence_number},
                 {"op", comm::OpTypeName(c.op)},
                 {"dtype", DTypeName(c.dtype)},
                 {"count", c.count},
                 {"bytes", c.count * static_cast<int64_t>(ElementSize(c.dtype))},
                 {"purpose", comm::PurposeName(c.tag)},
                 {"iteration", c.iteration},
                 {"shadow", c.tag.shadow},
                 {"queued_us", Us(c.queued_ns)},
                 {"ok", c.ok}};
    if (c.tag.bucket >= 0) args["bucket"] = c.tag.bucket;
    const int64_t end = c.finished_ns >= 0 ? c.finished_ns : c.started_ns;
    events.push_back(
        Span(rank, kCommLane, CollectiveName(c), "collective", c.started_ns, end, args));
  }
}

json RankMetadata(const RankTraceData& data, const std::vector<std::string>& names) {
  return {{"rank", data.trace.rank},
          {"clock_offset_us", Us(data.clock.offset_ns)},
          {"clock_uncertainty_us", Us(data.clock.uncertainty_ns)},
          {"dropped_records", data.trace.dropped},
          {"parameters", names},
          {"initial_buckets", Plan(data.ddp.initial_buckets())},
          {"rebuilt_buckets", Plan(data.ddp.rebuilt_buckets())},
          // What the run's DDP was asked for, as its logging data says: `simulate --calibrate`
          // knows from it which comm hook's work the trace holds.
          {"ddp_options",
           {{"bucket_cap_bytes", data.ddp.bucket_cap_bytes()},
            {"find_unused_parameters", data.ddp.find_unused_parameters()},
            {"static_graph", data.ddp.static_graph()},
            {"gradient_as_bucket_view", data.ddp.gradient_as_bucket_view()},
            {"comm_hook", data.ddp.comm_hook()}}}};
}

}  // namespace

json ChromeTraceJson(const TraceFile& file, bool distributed_info) {
  json events = json::array();
  json ranks = json::array();
  uint64_t job_id = 0;
  for (const RankTraceData& data : file.ranks) {
    const int rank = data.trace.rank;
    const std::vector<std::string> names = ParamNames(data.ddp);
    job_id = data.clock.job_id;
    events.push_back(Metadata(rank, "process_name", {{"name", StrCat("rank ", rank)}}));
    events.push_back(Metadata(rank, "process_sort_index", {{"sort_index", rank}}));
    events.push_back(Metadata(
        rank, "process_labels",
        {{"labels", StrCat(file.job, ", ", file.backend, ", world size ", file.world_size)}}));
    events.push_back(Metadata(rank, "thread_name", {{"name", "compute"}}, kComputeLane));
    events.push_back(Metadata(rank, "thread_name", {{"name", "communication"}}, kCommLane));
    AddCompute(data, names, events);
    AddCollectives(data, events);
    ranks.push_back(RankMetadata(data, names));
  }
  json out = {{"displayTimeUnit", "ms"},
              {"otherData",
               {{"ddpkit",
                 {{"job", file.job},
                  {"job_id", std::to_string(job_id)},
                  {"world_size", file.world_size},
                  {"backend", file.backend},
                  {"ranks", ranks}}}}},
              {"traceEvents", std::move(events)}};
  if (distributed_info && file.ranks.size() == 1) {
    out["distributedInfo"] = {{"backend", file.backend},
                              {"rank", file.ranks[0].trace.rank},
                              {"world_size", file.world_size}};
  }
  return out;
}

absl::Status WriteTraceFile(const TraceFile& file, const std::string& path, bool distributed_info) {
  return WriteFileAtomically(path, ChromeTraceJson(file, distributed_info).dump() + "\n");
}

}  // namespace ddpkit::trace
