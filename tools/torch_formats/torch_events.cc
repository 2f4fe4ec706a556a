#include "tools/torch_formats/torch_events.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/base/error.h"

namespace ddpkit::torch_formats {
namespace {

using nlohmann::json;

constexpr char kDdpForward[] = "DistributedDataParallel.forward";
// Bounds that keep every difference of two times finite and exact enough: a timestamp within
// ~3000 years of its epoch (Kineto writes Unix microseconds), a span under ~11 days.
constexpr double kMaxTs = 1e17, kMaxDur = 1e12;

absl::Status Invalid(const std::string& what, std::string_view why) {
  return absl::InvalidArgumentError(StrCat(what, ": ", why));
}

// The events array, or null when `trace` is not a Chrome trace at all.
const json* EventArray(const json& trace) {
  if (trace.is_array()) return &trace;
  if (trace.is_object()) {
    auto it = trace.find("traceEvents");
    if (it != trace.end() && it->is_array()) return &*it;
  }
  return nullptr;
}

// One complete event, checked; InvalidArgument naming it when a time is missing or absurd.
absl::StatusOr<TorchEvent> EventOf(const json& e, size_t index, const std::string& what) {
  const auto name = e.find("name");
  const auto ts = e.find("ts");
  const auto dur = e.find("dur");
  if (name == e.end() || !name->is_string()) {
    return Invalid(what, StrCat("event ", index, " (ph X) has no name"));
  }
  if (ts == e.end() || !ts->is_number() || (dur != e.end() && !dur->is_number())) {
    return Invalid(
        what, StrCat("event ", index, " (", name->get<std::string>(), ") has no numeric ts/dur"));
  }
  const double start = ts->get<double>(), length = dur == e.end() ? 0 : dur->get<double>();
  if (!(std::abs(start) <= kMaxTs) || !(length >= 0 && length <= kMaxDur)) {
    return Invalid(what, StrCat("event ", index, " (", name->get<std::string>(), ") has ts ", start,
                                ", dur ", length, ": out of range"));
  }
  return TorchEvent{name->get<std::string>(), start, start + length};
}

void ReadDistributedInfo(const json& trace, TorchRankEvents& out) {
  if (!trace.is_object()) return;
  auto it = trace.find("distributedInfo");
  if (it == trace.end() || !it->is_object()) return;
  auto number = [&](const char* key) {
    auto v = it->find(key);
    return v != it->end() && v->is_number_integer() ? v->get<int64_t>() : int64_t{-1};
  };
  const int64_t rank = number("rank"), world = number("world_size");
  if (rank >= 0 && rank < (1 << 20)) out.rank = static_cast<int>(rank);
  if (world > 0 && world <= (1 << 20)) out.world_size = static_cast<int>(world);
  auto backend = it->find("backend");
  if (backend != it->end() && backend->is_string()) out.backend = backend->get<std::string>();
}

bool LooksLikeTorch(const std::vector<TorchEvent>& events) {
  return std::any_of(events.begin(), events.end(), [](const TorchEvent& e) {
    return e.name.rfind("aten::", 0) == 0 || e.name.rfind("ProfilerStep#", 0) == 0 ||
           e.name.rfind("autograd::engine::", 0) == 0;
  });
}

}  // namespace

absl::StatusOr<TorchRankEvents> TorchEventsOf(const json& trace, const std::string& what) {
  const json* events = EventArray(trace);
  if (events == nullptr) {
    return Invalid(what,
                   "not a Chrome trace (neither an array of events nor an object with "
                   "traceEvents)");
  }
  TorchRankEvents out;
  ReadDistributedInfo(trace, out);
  for (size_t i = 0; i < events->size(); ++i) {
    const json& e = (*events)[i];
    if (!e.is_object()) return Invalid(what, StrCat("event ", i, " is not an object"));
    auto ph = e.find("ph");
    if (ph == e.end() || *ph != "X") continue;  // metadata, instants, flows, counters
    DDPKIT_ASSIGN_OR_RETURN(TorchEvent event, EventOf(e, i, what));
    out.events.push_back(std::move(event));
  }
  const bool ddp = std::any_of(out.events.begin(), out.events.end(),
                               [](const TorchEvent& e) { return e.name == kDdpForward; });
  if (!ddp) {
    return Invalid(what, LooksLikeTorch(out.events)
                             ? "a PyTorch profiler trace without DistributedDataParallel.forward: "
                               "profile iterations of the DDP-wrapped model"
                             : "not a PyTorch profiler trace (no aten::, autograd or "
                               "DistributedDataParallel events) nor a ddpkit trace");
  }
  double origin = std::numeric_limits<double>::max();
  for (const TorchEvent& e : out.events) origin = std::min(origin, e.start_us);
  for (TorchEvent& e : out.events) e.start_us -= origin, e.end_us -= origin;
  std::stable_sort(
      out.events.begin(), out.events.end(), [](const TorchEvent& a, const TorchEvent& b) {
        return a.start_us != b.start_us ? a.start_us < b.start_us : a.end_us > b.end_us;
      });
  return out;
}

}  // namespace ddpkit::torch_formats
