#include "tools/trace/stats.h"

#include <algorithm>
#include <limits>
#include <map>

namespace ddpkit::trace {
namespace {

bool IsCompute(const TraceItem& phase) {
  return phase.name == "forward" || phase.name == "backward" || phase.name == "optimizer";
}

// One rank's items of one iteration.
struct IterationItems {
  std::vector<const TraceItem*> phases, collectives;
  std::vector<const TraceItem*> launched, reduced;  // the reducer's stamps per bucket
};

std::map<int, IterationItems> ByIteration(const RankView& rank) {
  std::map<int, IterationItems> out;
  for (const TraceItem& p : rank.phases) {
    if (p.iteration >= 0) out[p.iteration].phases.push_back(&p);
  }
  for (const TraceItem& c : rank.collectives) {
    if (c.iteration >= 0) out[c.iteration].collectives.push_back(&c);
  }
  for (const TraceItem& i : rank.instants) {
    if (i.iteration < 0) continue;
    if (i.event == "launched") out[i.iteration].launched.push_back(&i);
    if (i.event == "reduced") out[i.iteration].reduced.push_back(&i);
  }
  return out;
}

const TraceItem* Finalize(const IterationItems& items) {
  const TraceItem* found = nullptr;
  for (const TraceItem* p : items.phases) {
    if (p->name == "finalize") found = p;  // the synced micro-batch's, the last one
  }
  return found;
}

// DDP's logging-data figures, from the instants the reducer times them by: first bucket
// launched -> last bucket reduced, the part of that before backward's compute ended (finalize's
// start), and finalize itself. A shadowing rank's iteration has no finalize, so none.
void AddDdpFigures(const IterationItems& items, const TraceItem* finalize, IterationStats& s) {
  if (finalize == nullptr || items.launched.empty() || items.reduced.empty()) return;
  double first_launch = std::numeric_limits<double>::max(), last_end = 0;
  for (const TraceItem* i : items.launched) first_launch = std::min(first_launch, i->start_us);
  for (const TraceItem* i : items.reduced) last_end = std::max(last_end, i->start_us);
  last_end = std::max(last_end, first_launch);
  s.set_ddp_comm_us(last_end - first_launch);
  s.set_ddp_overlap_us(std::max(0.0, std::min(finalize->start_us, last_end) - first_launch));
  s.set_ddp_exposed_us(finalize->end_us - finalize->start_us);
}

IterationStats StatsOf(int rank, int iteration, const IterationItems& items) {
  IterationStats s;
  s.set_rank(rank);
  s.set_iteration(iteration);
  Intervals compute, comm, window;
  double start = std::numeric_limits<double>::max(), end = 0;
  for (const TraceItem* p : items.phases) {
    start = std::min(start, p->start_us);
    end = std::max(end, p->end_us);
    if (IsCompute(*p)) compute.emplace_back(p->start_us, p->end_us);
    if (p->name == "shadow") s.set_synced(true);
  }
  for (const TraceItem* c : items.collectives) comm.emplace_back(c->start_us, c->end_us);
  compute = MergeIntervals(std::move(compute));
  comm = MergeIntervals(std::move(comm));
  Intervals both = compute;
  both.insert(both.end(), comm.begin(), comm.end());
  s.set_window_us(items.phases.empty() ? 0 : end - start);
  s.set_compute_us(TotalLength(compute));
  s.set_comm_us(TotalLength(comm));
  s.set_overlap_us(OverlapLength(compute, comm));
  s.set_overlap_pct(s.comm_us() > 0 ? 100 * s.overlap_us() / s.comm_us() : 0);
  s.set_exposed_us(s.comm_us() - s.overlap_us());
  s.set_idle_us(std::max(0.0, s.window_us() - TotalLength(MergeIntervals(both))));
  const TraceItem* finalize = Finalize(items);
  if (finalize != nullptr) {
    s.set_synced(true);
    s.set_finalize_us(finalize->end_us - finalize->start_us);
    for (const TraceItem* c : items.collectives) {
      if (c->purpose != "bucket" || c->shadow) continue;
      BucketWait& w = *s.add_buckets();
      w.set_bucket(c->bucket);
      w.set_allreduce_us(c->end_us - c->start_us);
      w.set_wait_us(std::max(0.0, c->end_us - finalize->start_us));
    }
  }
  AddDdpFigures(items, finalize, s);
  return s;
}

RankTotals TotalsOf(int rank, const std::vector<IterationStats>& rows) {
  RankTotals t;
  t.set_rank(rank);
  int ddp_rows = 0;
  for (const IterationStats& s : rows) {
    if (s.rank() != rank || !s.synced()) continue;
    t.set_iterations(t.iterations() + 1);
    t.set_compute_us(t.compute_us() + s.compute_us());
    t.set_comm_us(t.comm_us() + s.comm_us());
    t.set_overlap_us(t.overlap_us() + s.overlap_us());
    t.set_exposed_us(t.exposed_us() + s.exposed_us());
    t.set_idle_us(t.idle_us() + s.idle_us());
    if (s.ddp_comm_us() > 0) {
      ++ddp_rows;
      t.set_avg_ddp_comm_us(t.avg_ddp_comm_us() + s.ddp_comm_us());
      t.set_avg_ddp_overlap_us(t.avg_ddp_overlap_us() + s.ddp_overlap_us());
      t.set_avg_ddp_exposed_us(t.avg_ddp_exposed_us() + s.ddp_exposed_us());
    }
  }
  t.set_overlap_pct(t.comm_us() > 0 ? 100 * t.overlap_us() / t.comm_us() : 0);
  if (ddp_rows > 0) {
    t.set_avg_ddp_comm_us(t.avg_ddp_comm_us() / ddp_rows);
    t.set_avg_ddp_overlap_us(t.avg_ddp_overlap_us() / ddp_rows);
    t.set_avg_ddp_exposed_us(t.avg_ddp_exposed_us() / ddp_rows);
  }
  return t;
}

// Per iteration: the rank whose window was longest, and by how much.
void AddSlowest(TraceStatsReport& report) {
  std::map<int, std::vector<const IterationStats*>> by_iteration;
  for (const IterationStats& s : report.iterations()) by_iteration[s.iteration()].push_back(&s);
  for (const auto& [iteration, rows] : by_iteration) {
    const auto [shortest, longest] = std::minmax_element(
        rows.begin(), rows.end(), [](const IterationStats* a, const IterationStats* b) {
          return a->window_us() < b->window_us();
        });
    SlowestRank& slowest = *report.add_slowest();
    slowest.set_iteration(iteration);
    slowest.set_rank((*longest)->rank());
    slowest.set_window_us((*longest)->window_us());
    slowest.set_spread_us((*longest)->window_us() - (*shortest)->window_us());
  }
}

}  // namespace

Intervals MergeIntervals(Intervals spans) {
  std::sort(spans.begin(), spans.end());
  Intervals merged;
  for (const auto& [a, b] : spans) {
    if (b <= a) continue;
    if (!merged.empty() && a <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, b);
    } else {
      merged.emplace_back(a, b);
    }
  }
  return merged;
}

double TotalLength(const Intervals& merged) {
  double total = 0;
  for (const auto& [a, b] : merged) total += b - a;
  return total;
}

double OverlapLength(const Intervals& a, const Intervals& b) {
  double total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) total += hi - lo;
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return total;
}

TraceStatsReport ComputeTraceStats(const TraceView& view) {
  TraceStatsReport report;
  report.set_job(view.job);
  report.set_world_size(view.world_size);
  report.set_backend(view.backend);
  std::map<int, std::vector<IterationStats>> rows_by_iteration;
  for (const RankView& rank : view.ranks) {
    for (const auto& [iteration, items] : ByIteration(rank)) {
      rows_by_iteration[iteration].push_back(StatsOf(rank.rank, iteration, items));
    }
  }
  for (auto& [iteration, rows] : rows_by_iteration) {
    for (IterationStats& s : rows) *report.add_iterations() = std::move(s);
  }
  const std::vector<IterationStats> all(report.iterations().begin(), report.iterations().end());
  for (const RankView& rank : view.ranks) *report.add_ranks() = TotalsOf(rank.rank, all);
  AddSlowest(report);
  return report;
}

}  // namespace ddpkit::trace
