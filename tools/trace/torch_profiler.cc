#include "tools/trace/torch_profiler.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <span>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "autograd/base/error.h"
#include "tools/torch_formats/torch_events.h"

namespace ddpkit::trace {

using torch_formats::TorchEvent;
using torch_formats::TorchEventsOf;
using torch_formats::TorchRankEvents;
namespace {

using nlohmann::json;

bool StartsWith(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }
bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) == 0;
}

bool IsBackend(const std::string& name) {
  return StartsWith(name, "gloo:") || StartsWith(name, "nccl:") || StartsWith(name, "mpi:");
}

// "c10d::allreduce_", "gloo:all_reduce" and "nccl:all_reduce" all -> "allreduce".
std::string KindOf(const std::string& name) {
  std::string kind = name.substr(name.rfind(':') + 1);
  absl::StrReplaceAll({{"_", ""}}, &kind);
  return absl::AsciiStrToLower(kind);
}

// A collective DDP (or the user) issued: the c10d call on the issuing thread and, matched to
// it, the backend's span of the work itself (absent when the trace has none).
struct Collective {
  const TorchEvent* call = nullptr;
  const TorchEvent* work = nullptr;
  std::string kind;
  double Start() const { return (work ? work : call)->start_us; }
  double End() const { return std::max(call->end_us, work ? work->end_us : 0.0); }
};

// Each c10d call with the backend span of the same kind and place in order.
std::vector<Collective> CollectivesOf(const std::vector<TorchEvent>& events) {
  std::vector<Collective> calls;
  std::map<std::string, std::vector<const TorchEvent*>> works;
  for (const TorchEvent& e : events) {
    if (StartsWith(e.name, "c10d::")) calls.push_back({&e, nullptr, KindOf(e.name)});
    if (IsBackend(e.name)) works[KindOf(e.name)].push_back(&e);
  }
  std::map<std::string, size_t> used;
  for (Collective& c : calls) {
    std::vector<const TorchEvent*>& of_kind = works[c.kind];
    if (size_t& i = used[c.kind]; i < of_kind.size()) c.work = of_kind[i++];
  }
  return calls;
}

// An iteration: one DDP forward, until the next one starts.
struct IterationWindow {
  int number = 0;
  const TorchEvent* forward = nullptr;
  double end_us = std::numeric_limits<double>::max();
};

// Numbered by the ProfilerStep#N around each forward when every forward has one (and they
// increase), else 0, 1, ...
std::vector<IterationWindow> IterationsOf(const std::vector<TorchEvent>& events) {
  std::vector<IterationWindow> out;
  std::vector<const TorchEvent*> steps;
  for (const TorchEvent& e : events) {
    if (e.name == "DistributedDataParallel.forward") {
      if (!out.empty() && e.start_us < out.back().forward->end_us) continue;  // nested (reentrant)
      if (!out.empty()) out.back().end_us = e.start_us;
      out.push_back({static_cast<int>(out.size()), &e});
    }
    if (StartsWith(e.name, "ProfilerStep#")) steps.push_back(&e);
  }
  std::vector<int> numbers;
  for (const IterationWindow& w : out) {
    for (const TorchEvent* s : steps) {
      int n = 0;
      if (s->start_us <= w.forward->start_us && w.forward->end_us <= s->end_us &&
          absl::SimpleAtoi(s->name.substr(13), &n) && n >= 0 && n < (1 << 24)) {
        numbers.push_back(n);
        break;
      }
    }
  }
  const bool usable = numbers.size() == out.size() &&
                      std::is_sorted(numbers.begin(), numbers.end()) &&
                      std::set<int>(numbers.begin(), numbers.end()).size() == numbers.size();
  if (usable) {
    for (size_t i = 0; i < out.size(); ++i) out[i].number = numbers[i];
  }
  return out;
}

bool In(double t, double from, double to) { return t >= from && t < to; }

// The events (sorted by start) that start in [from, to), without reading the others.
std::span<const TorchEvent> Starting(const std::vector<TorchEvent>& events, double from,
                                     double to) {
  auto by_start = [](const TorchEvent& e, double t) { return e.start_us < t; };
  auto first = std::lower_bound(events.begin(), events.end(), from, by_start);
  auto last = std::lower_bound(first, events.end(), to, by_start);
  return {first, last};
}

TraceItem Phase(const char* name, int iteration, double start, double end) {
  TraceItem p;
  p.name = name;
  p.iteration = iteration;
  p.start_us = start;
  p.end_us = std::max(start, end);
  return p;
}

// What one iteration's backward holds: its compute span, each gradient's AccumulateGrad
// (ready when its accumulation ends), the buckets DDP launched, and finalize's last copy.
struct Backward {
  double start = -1, end = -1;
  std::vector<double> ready;   // per gradient, in arrival order
  std::vector<double> called;  // when its AccumulateGrad began (a launch it made comes after)
  double last_copy = -1;
};

Backward BackwardOf(const std::vector<TorchEvent>& events, const IterationWindow& w) {
  Backward b;
  double open_end = -1;  // the AccumulateGrad evaluate_function being read, if any
  for (const TorchEvent& e : Starting(events, w.forward->end_us, w.end_us)) {
    if (StartsWith(e.name, "autograd::engine::evaluate_function: ")) {
      if (b.start < 0) b.start = e.start_us;
      b.end = std::max(b.end, e.end_us);
      if (EndsWith(e.name, "AccumulateGrad")) {
        b.ready.push_back(e.end_us), b.called.push_back(e.start_us), open_end = e.end_us;
      }
    } else if (e.name == "torch::autograd::AccumulateGrad" && e.end_us <= open_end &&
               !b.ready.empty()) {
      b.ready.back() = e.end_us;  // the accumulation itself; DDP's hook runs after it
      open_end = -1;
    } else if (e.name == "torch.distributed.ddp.reducer::copy_bucket_to_grad") {
      b.last_copy = std::max(b.last_copy, e.end_us);
    }
  }
  return b;
}

struct RankBuild {
  RankView view;
  const TorchPlan* plan = nullptr;
  std::vector<std::string>* warnings = nullptr;
  std::string what;
};

TraceItem CollectiveItem(const Collective& c, int64_t seq, int iteration, int bucket,
                         const TorchPlan* plan) {
  TraceItem item;
  item.name = bucket >= 0 ? StrCat(c.kind, " bucket ", bucket) : c.kind;
  item.start_us = c.Start();
  item.end_us = c.End();
  item.queued_us = c.call->start_us;
  item.iteration = iteration;
  item.bucket = bucket;
  item.seq = seq;
  item.op = absl::AsciiStrToUpper(c.kind);
  item.purpose = bucket >= 0 ? "bucket" : c.kind;
  if (plan != nullptr && bucket >= 0 && bucket < static_cast<int>(plan->bucket_bytes.size())) {
    item.bytes = plan->bucket_bytes[bucket];
  }
  return item;
}

TraceItem Instant(std::string name, int iteration, int bucket, double at, std::string event) {
  TraceItem i;
  i.name = std::move(name);
  i.iteration = iteration;
  i.bucket = bucket;
  i.start_us = i.end_us = at;
  i.event = std::move(event);
  return i;
}

// The hooks of one iteration: gradient g belongs to the bucket whose launch followed it, and,
// with a plan whose bucket has as many gradients, is that bucket's g-th parameter.
void AddHooks(RankBuild& r, int iteration, const Backward& b, const std::vector<double>& launches) {
  std::vector<std::vector<size_t>> members(launches.size());
  for (size_t g = 0; g < b.ready.size(); ++g) {
    const size_t bucket =
        std::lower_bound(launches.begin(), launches.end(), b.called[g]) - launches.begin();
    TraceItem h = Instant(StrCat("gradient ", g), iteration, -1, b.ready[g], "");
    if (bucket < launches.size()) h.bucket = static_cast<int>(bucket), members[bucket].push_back(g);
    r.view.hooks.push_back(std::move(h));
  }
  if (r.plan == nullptr) return;
  const size_t first = r.view.hooks.size() - b.ready.size();
  for (size_t k = 0; k < members.size(); ++k) {
    if (k >= r.plan->buckets.size() || r.plan->buckets[k].size() != members[k].size()) {
      r.warnings->push_back(StrCat(r.what, ": iteration ", iteration, " bucket ", k, " has ",
                                   members[k].size(), " gradient(s); the plan does not match"));
      continue;
    }
    for (size_t j = 0; j < members[k].size(); ++j) {
      TraceItem& h = r.view.hooks[first + members[k][j]];
      h.param = r.plan->buckets[k][j];
      if (h.param >= 0 && h.param < static_cast<int>(r.plan->param_names.size())) {
        h.name = r.plan->param_names[h.param];
      }
    }
  }
}

// One iteration's phases, collectives and DDP's launched/reduced instants (stats.cc times
// DDP's logging-data figures by them: first launch -> last reduced = finalize's end).
void AddIteration(RankBuild& r, const std::vector<TorchEvent>& events,
                  const std::vector<Collective>& collectives, const IterationWindow& w) {
  const int it = w.number;
  const Backward b = BackwardOf(events, w);
  const double backward_start = b.start >= 0 ? b.start : w.forward->end_us;
  r.view.phases.push_back(Phase("forward", it, w.forward->start_us, backward_start));
  if (b.start >= 0) r.view.phases.push_back(Phase("backward", it, b.start, b.end));
  std::vector<double> launches;
  std::vector<size_t> bucket_items;  // their places in r.view.collectives
  double reduced = b.end;
  for (size_t i = 0; i < collectives.size(); ++i) {
    const Collective& c = collectives[i];
    if (!In(c.call->start_us, w.forward->start_us, w.end_us)) continue;
    const bool bucket =
        b.start >= 0 && c.kind == "allreduce" && In(c.call->start_us, b.start, b.end);
    const int index = bucket ? static_cast<int>(launches.size()) : -1;
    r.view.collectives.push_back(CollectiveItem(c, static_cast<int64_t>(i), it, index, r.plan));
    if (!bucket) continue;
    bucket_items.push_back(r.view.collectives.size() - 1);
    launches.push_back(c.call->start_us);
    reduced = std::max(reduced, c.End());
    r.view.instants.push_back(
        Instant(StrCat("bucket ", index, " launched"), it, index, c.call->start_us, "launched"));
  }
  if (!launches.empty()) {
    // Finalize ends with its last copy into .grad, when there is one. A worker thread can stamp
    // a collective's end after the waiting thread already had its result (it was preempted in
    // between), so no bucket's communication is counted past that point.
    if (b.last_copy >= 0) reduced = std::max(b.end, b.last_copy);
    for (size_t i : bucket_items) {
      TraceItem& c = r.view.collectives[i];
      c.end_us = std::max(c.start_us, std::min(c.end_us, reduced));
    }
    r.view.phases.push_back(Phase("finalize", it, b.end, reduced));
    r.view.instants.push_back(Instant(StrCat("bucket ", launches.size() - 1, " reduced"), it,
                                      static_cast<int>(launches.size()) - 1, reduced, "reduced"));
  }
  for (const TorchEvent& e : Starting(events, backward_start, w.end_us)) {
    if (StartsWith(e.name, "Optimizer.step#")) {
      r.view.phases.push_back(Phase("optimizer", it, e.start_us, e.end_us));
    }
  }
  AddHooks(r, it, b, launches);
}

// Shifts `rank` so its collectives end when `reference`'s do (the median difference over the
// collectives both issued: the same iteration, the same place in it); returns the shift in
// microseconds.
double AlignTo(const RankView& reference, RankView& rank) {
  auto keyed = [](const RankView& r) {
    std::map<std::pair<int, int>, double> ends;
    std::map<int, int> count;
    for (const TraceItem& c : r.collectives) ends[{c.iteration, count[c.iteration]++}] = c.end_us;
    return ends;
  };
  const std::map<std::pair<int, int>, double> ours = keyed(rank);
  std::vector<double> differences;
  for (const auto& [key, end] : keyed(reference)) {
    if (auto it = ours.find(key); it != ours.end()) differences.push_back(end - it->second);
  }
  if (differences.empty()) return 0;
  std::nth_element(differences.begin(), differences.begin() + differences.size() / 2,
                   differences.end());
  const double shift = differences[differences.size() / 2];
  auto move = [shift](std::vector<TraceItem>& items) {
    for (TraceItem& i : items) i.start_us += shift, i.end_us += shift, i.queued_us += shift;
  };
  move(rank.phases), move(rank.hooks), move(rank.collectives), move(rank.instants);
  return shift;
}

// The rank a file holds: its distributedInfo's, else the number after "rank" in its name.
int RankOf(const TorchRankEvents& events, const std::string& name, int position) {
  if (events.rank >= 0) return events.rank;
  const size_t slash = name.find_last_of('/');
  const size_t at = name.rfind("rank");
  if (at != std::string::npos && (slash == std::string::npos || at > slash)) {
    size_t end = at + 4;
    while (end < name.size() && (name[end] == '-' || name[end] == '_')) ++end;
    const size_t digits_start = end;
    while (end < name.size() && absl::ascii_isdigit(name[end]) && end - digits_start < 6) ++end;
    int rank = 0;
    if (absl::SimpleAtoi(name.substr(digits_start, end - digits_start), &rank)) return rank;
  }
  return position;
}

std::string BackendOf(const TorchRankEvents& events) {
  if (!events.backend.empty()) return events.backend;
  for (const TorchEvent& e : events.events) {
    if (IsBackend(e.name)) return e.name.substr(0, e.name.find(':'));
  }
  return "";
}

absl::StatusOr<RankView> ReadRank(const TorchTraceJson& file, int position, const TorchPlan* plan,
                                  TraceView& view, std::vector<std::string>& warnings) {
  const json& parsed = file.json;
  if (!IsForeignChromeTrace(parsed) && parsed.is_object() && parsed.contains("traceEvents")) {
    return absl::InvalidArgumentError(
        StrCat(file.name,
               ": a ddpkit trace among PyTorch traces; read it alone, or merge ddpkit's "
               "rank files with `ddpkit trace merge`"));
  }
  DDPKIT_ASSIGN_OR_RETURN(TorchRankEvents events, TorchEventsOf(parsed, file.name));
  RankBuild r{.view = {}, .plan = plan, .warnings = &warnings, .what = file.name};
  r.view.rank = RankOf(events, file.name, position);
  const std::vector<Collective> collectives = CollectivesOf(events.events);
  for (const IterationWindow& w : IterationsOf(events.events)) {
    AddIteration(r, events.events, collectives, w);
  }
  view.world_size = std::max(view.world_size, events.world_size);
  if (view.backend.empty()) view.backend = BackendOf(events);
  return std::move(r.view);
}

}  // namespace

bool IsForeignChromeTrace(const json& trace) {
  if (trace.is_array()) return true;
  if (!trace.is_object() || !trace.contains("traceEvents")) return false;
  auto other = trace.find("otherData");
  return other == trace.end() || !other->is_object() || !other->contains("ddpkit");
}

absl::StatusOr<TraceView> ParseTorchTraces(const std::vector<TorchTraceText>& files,
                                           const TorchPlan* plan) {
  std::vector<TorchTraceJson> parsed;
  for (const TorchTraceText& file : files) {
    json j = json::parse(file.text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      return absl::InvalidArgumentError(StrCat(file.name, ": not JSON (a Chrome trace is JSON)"));
    }
    parsed.push_back({file.name, std::move(j)});
  }
  return TorchTracesView(parsed, plan);
}

absl::StatusOr<TraceView> TorchTracesView(const std::vector<TorchTraceJson>& files,
                                          const TorchPlan* plan) {
  if (files.empty()) return absl::InvalidArgumentError("no PyTorch profiler traces to read");
  TraceView view;
  view.job = "pytorch profiler";
  view.world_size = static_cast<int>(files.size());
  std::vector<std::string> warnings;
  json ranks = json::array();
  for (size_t i = 0; i < files.size(); ++i) {
    DDPKIT_ASSIGN_OR_RETURN(RankView rank,
                            ReadRank(files[i], static_cast<int>(i), plan, view, warnings));
    for (const RankView& other : view.ranks) {
      if (other.rank == rank.rank) {
        return absl::InvalidArgumentError(StrCat(files[i].name, ": holds rank ", rank.rank,
                                                 " again (give each rank's file once)"));
      }
    }
    view.ranks.push_back(std::move(rank));
  }
  std::vector<size_t> order(files.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return view.ranks[a].rank < view.ranks[b].rank; });
  std::vector<RankView> sorted;
  for (size_t i : order) sorted.push_back(std::move(view.ranks[i]));
  view.ranks = std::move(sorted);
  for (size_t i = 0; i < view.ranks.size(); ++i) {
    const double shift = i == 0 ? 0 : AlignTo(view.ranks[0], view.ranks[i]);
    ranks.push_back(
        {{"rank", view.ranks[i].rank}, {"file", files[order[i]].name}, {"clock_offset_us", shift}});
  }
  view.other_data = {{"source", "torch.profiler"}, {"ranks", ranks}, {"warnings", warnings}};
  return view;
}

absl::StatusOr<TorchPlan> ParseTorchPlan(const json& plan, const std::string& what) {
  auto invalid = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat(what, ": not a DDP plan (", why, ")"));
  };
  if (!plan.is_object()) return invalid("not a JSON object");
  TorchPlan out;
  try {
    if (plan.contains("per_bucket_param_indices")) {
      out.buckets = plan["per_bucket_param_indices"].get<std::vector<std::vector<int>>>();
    } else if (plan.contains("rebuilt_per_bucket_param_indices")) {
      for (absl::string_view bucket :
           absl::StrSplit(plan["rebuilt_per_bucket_param_indices"].get<std::string>(), ',')) {
        std::vector<int>& indices = out.buckets.emplace_back();
        for (absl::string_view i : absl::StrSplit(bucket, ' ', absl::SkipEmpty())) {
          if (!absl::SimpleAtoi(i, &indices.emplace_back())) return invalid("a bad index");
        }
      }
    } else {
      return invalid("no per_bucket_param_indices or rebuilt_per_bucket_param_indices");
    }
    if (plan.contains("bucket_sizes")) {
      out.bucket_bytes = plan["bucket_sizes"].get<std::vector<int64_t>>();
    } else if (plan.contains("rebuilt_bucket_sizes")) {
      for (absl::string_view s :
           absl::StrSplit(plan["rebuilt_bucket_sizes"].get<std::string>(), ',')) {
        if (!absl::SimpleAtoi(s, &out.bucket_bytes.emplace_back())) return invalid("a bad size");
      }
    }
    if (plan.contains("parameter_names")) {
      out.param_names = plan["parameter_names"].get<std::vector<std::string>>();
    }
  } catch (const json::exception& e) {
    return invalid(e.what());
  }
  return out;
}

}  // namespace ddpkit::trace
