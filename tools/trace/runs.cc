#include "tools/trace/runs.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "autograd/base/error.h"

namespace ddpkit::trace {
namespace {

using absl::StrCat;

template <typename F>
void ForEachItem(RankView& rank, F f) {
  for (std::vector<TraceItem>* items :
       {&rank.phases, &rank.hooks, &rank.collectives, &rank.instants}) {
    for (TraceItem& item : *items) f(item);
  }
}

// What must match between runs, from each rank's otherData entry: its parameter names and its
// DDP options without the bucket cap (the cap is what the runs are there to differ in).
nlohmann::json Identity(const nlohmann::json& other_data) {
  nlohmann::json id = nlohmann::json::object();
  if (!other_data.is_object() || !other_data.contains("ranks") || !other_data["ranks"].is_array() ||
      other_data["ranks"].empty() || !other_data["ranks"][0].is_object()) {
    return id;
  }
  const nlohmann::json& r = other_data["ranks"][0];
  if (r.contains("parameters")) id["parameters"] = r["parameters"];
  if (r.contains("ddp_options") && r["ddp_options"].is_object()) {
    nlohmann::json options = r["ddp_options"];
    options.erase("bucket_cap_bytes");
    id["ddp_options"] = options;
  }
  return id;
}

std::vector<int> Ranks(const TraceView& view) {
  std::vector<int> ranks;
  for (const RankView& r : view.ranks) ranks.push_back(r.rank);
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

absl::Status CheckSameRun(const TraceView& first, const TraceView& next, const std::string& a,
                          const std::string& b) {
  const auto differ = [&](const char* what, const std::string& x, const std::string& y) {
    return absl::InvalidArgumentError(StrCat(
        b, ": ", what, " ", y, " against ", x, " in ", a,
        ": runs calibrated from together must differ only in their bucket cap (pass one alone, "
        "or runs of the same job)"));
  };
  if (next.job != first.job) return differ("job", first.job, next.job);
  if (next.backend != first.backend) return differ("backend", first.backend, next.backend);
  if (next.world_size != first.world_size) {
    return differ("world size", StrCat(first.world_size), StrCat(next.world_size));
  }
  if (Ranks(next) != Ranks(first)) {
    return absl::InvalidArgumentError(
        StrCat(b, ": ranks ", absl::StrJoin(Ranks(next), ","), " against ",
               absl::StrJoin(Ranks(first), ","), " in ", a,
               ": runs calibrated from together must each hold every rank (one rank's files of "
               "one run are merged with `ddpkit trace merge` first)"));
  }
  const nlohmann::json x = Identity(first.other_data), y = Identity(next.other_data);
  if (x.value("parameters", nlohmann::json()) != y.value("parameters", nlohmann::json())) {
    return differ("parameters", x.value("parameters", nlohmann::json()).dump(),
                  y.value("parameters", nlohmann::json()).dump());
  }
  const nlohmann::json none = nlohmann::json::object();
  const nlohmann::json& ox = x.contains("ddp_options") ? x["ddp_options"] : none;
  const nlohmann::json& oy = y.contains("ddp_options") ? y["ddp_options"] : none;
  for (const auto* o : {&ox, &oy}) {
    for (const auto& [key, value] : o->items()) {
      const nlohmann::json a_value = ox.value(key, nlohmann::json()),
                           b_value = oy.value(key, nlohmann::json());
      if (a_value != b_value) return differ(key.c_str(), a_value.dump(), b_value.dump());
    }
  }
  return absl::OkStatus();
}

// Where a view lies on the clock and in its numbering (start > end: it holds no item).
struct Extent {
  double start = std::numeric_limits<double>::max(), end = std::numeric_limits<double>::lowest();
  int last_iteration = -1;
  int64_t last_seq = -1;
};

Extent ExtentOf(TraceView& view) {
  Extent e;
  for (RankView& r : view.ranks) {
    ForEachItem(r, [&](TraceItem& i) {
      e.start = std::min(e.start, i.start_us), e.end = std::max(e.end, i.end_us);
      e.last_iteration = std::max(e.last_iteration, i.iteration);
    });
    for (const TraceItem& c : r.collectives) e.last_seq = std::max(e.last_seq, c.seq);
  }
  return e;
}

}  // namespace

absl::StatusOr<TraceView> RunsOneAfterAnother(std::vector<TraceView> runs,
                                              const std::vector<std::string>& names) {
  DDPKIT_INTERNAL_CHECK(!runs.empty() && runs.size() == names.size(),
                        "RunsOneAfterAnother: ", runs.size(), " runs, ", names.size(), " names");
  TraceView out = std::move(runs[0]);
  for (size_t k = 1; k < runs.size(); ++k) {
    TraceView& next = runs[k];
    DDPKIT_RETURN_IF_ERROR(CheckSameRun(out, next, names[0], names[k]));
    const Extent before = ExtentOf(out), after = ExtentOf(next);
    if (int64_t{before.last_iteration} + 1 + after.last_iteration >
            std::numeric_limits<int>::max() ||
        (after.last_seq >= 0 &&
         before.last_seq + 1 > std::numeric_limits<int64_t>::max() - after.last_seq)) {
      return absl::InvalidArgumentError(
          StrCat(names[k],
                 ": after the runs before it, its iteration or sequence numbers pass "
                 "the largest a trace can hold; calibrate from fewer runs"));
    }
    const double shift =
        before.start <= before.end && after.start <= after.end ? before.end - after.start + 1e6 : 0;
    for (RankView& r : next.ranks) {
      auto into = std::find_if(out.ranks.begin(), out.ranks.end(),
                               [&](const RankView& o) { return o.rank == r.rank; });
      ForEachItem(r, [&](TraceItem& i) {
        i.start_us += shift, i.end_us += shift;
        if (i.queued_us > 0) i.queued_us += shift;  // 0: the trace did not say
        if (i.iteration >= 0) i.iteration += before.last_iteration + 1;
      });
      // Its collectives after the earlier runs' in sequence too (a view keeps them in order).
      for (TraceItem& c : r.collectives) {
        if (c.seq >= 0) c.seq += before.last_seq + 1;
      }
      for (auto [from, to] : {std::pair{&r.phases, &into->phases},
                              {&r.hooks, &into->hooks},
                              {&r.collectives, &into->collectives},
                              {&r.instants, &into->instants}}) {
        to->insert(to->end(), from->begin(), from->end());
      }
    }
  }
  return out;
}

}  // namespace ddpkit::trace
