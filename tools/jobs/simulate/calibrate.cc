#include "tools/jobs/simulate/calibrate.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_format.h"
#include "autograd/base/error.h"
#include "tools/jobs/simulate/trace_samples.h"

namespace ddpkit::jobs::sim {
namespace {

double Clamp(double v) { return std::clamp(v, 0.01, 1.0); }

// How much of [from, to] some allreduce of `it` ran in, as a fraction.
double CommShare(const IterationSample& it, double from, double to) {
  if (to <= from) return 0;
  double covered = 0, reach = from;  // allreduces run one at a time, in start order
  for (const AllreduceSample& a : it.allreduces) {
    const double lo = std::max(reach, a.start_us), hi = std::min(to, a.end_us);
    if (hi > lo) covered += hi - lo, reach = hi;
  }
  return covered / (to - from);
}

// The bucket allreduces that ran (all but) alone, as (bytes, median time)
// per size; and the ones that started during backward.
struct AllreduceSplit {
  std::vector<std::pair<double, double>> alone;  // per size
  int alone_count = 0;
  std::vector<std::pair<const IterationSample*, const AllreduceSample*>> alone_runs;
  std::vector<std::pair<const IterationSample*, const AllreduceSample*>> during;
};

AllreduceSplit SplitAllreduces(const std::vector<IterationSample>& samples) {
  std::map<double, std::vector<double>> by_size;
  AllreduceSplit split;
  for (const IterationSample& it : samples) {
    for (const AllreduceSample& a : it.allreduces) {
      // Started after backward, or ran beside it for under a tenth of its time.
      const double during = std::max(0.0, std::min(a.end_us, it.backward_end_us) - a.start_us);
      if (during <= 0.1 * (a.end_us - a.start_us)) {
        by_size[a.bytes].push_back(a.end_us - a.start_us), ++split.alone_count;
        split.alone_runs.emplace_back(&it, &a);
      } else {
        split.during.emplace_back(&it, &a);
      }
    }
  }
  for (const auto& [bytes, times] : by_size) split.alone.emplace_back(bytes, Median(times));
  return split;
}

// Each overlapped collective's speed during backward: its cost alone, less its time after
// backward, done in its time during backward.
double CommRate(const AllreduceSplit& split, const LinearFit& alone) {
  std::vector<double> rates;
  for (const auto& [it, a] : split.during) {
    const double during = std::min(a->end_us, it->backward_end_us) - a->start_us;
    const double after = std::max(0.0, a->end_us - it->backward_end_us);
    if (during <= 0) continue;
    rates.push_back(Clamp((alone.a_us + alone.b_us_per_byte * a->bytes - after) / during));
  }
  return rates.empty() ? 1 : Median(rates);
}

// One backward work item seen once: gradient `item` (the model's parameter count: the tail).
struct Gap {
  size_t item;
  double us, comm_share;
};

// One iteration's gaps: each gradient's, then backward's tail (item `params`).
std::vector<Gap> IterationGaps(const IterationSample& it, size_t params) {
  std::vector<Gap> gaps;
  double last = it.backward_start_us;
  for (const GradientSample& g : it.gradients) {
    const double at = std::max(last, g.ready_us);
    gaps.push_back({static_cast<size_t>(g.param), at - last, CommShare(it, last, at)});
    last = at;
  }
  const double end = std::max(last, it.backward_end_us);
  gaps.push_back({params, end - last, CommShare(it, last, end)});
  return gaps;
}

std::vector<Gap> Gaps(const std::vector<IterationSample>& samples, size_t params) {
  std::vector<Gap> gaps;
  for (const IterationSample& it : samples) {
    for (const Gap& g : IterationGaps(it, params)) gaps.push_back(g);
  }
  return gaps;
}

// Each item's time alone when backward runs at `rate` beside a collective: a gap of g with a
// share f of it beside one did g·(1 - f) + g·f·rate of work. The median over its gaps.
std::vector<double> AloneTimes(const std::vector<Gap>& gaps, size_t items, double rate) {
  std::vector<std::vector<double>> per(items);
  for (const Gap& g : gaps) per[g.item].push_back(g.us * (1 - g.comm_share * (1 - rate)));
  std::vector<double> out(items);
  for (size_t i = 0; i < items; ++i) out[i] = Median(per[i]);
  return out;
}

// Items seen both mostly alone and mostly beside a collective: only they tell s apart.
int ItemsSeenBothWays(const std::vector<Gap>& gaps, size_t items) {
  std::vector<int> seen(items, 0);
  for (const Gap& g : gaps) {
    if (g.us <= 0) continue;
    seen[g.item] |= g.comm_share < 0.25 ? 1 : g.comm_share > 0.75 ? 2 : 0;
  }
  return static_cast<int>(std::count(seen.begin(), seen.end(), 3));
}

// The rate in [0.1, 1], in steps of 0.01, whose gaps fit best: least total relative error.
double FitComputeRate(const std::vector<Gap>& gaps, size_t items) {
  double best_rate = 1, best_cost = -1;
  for (int step = 100; step >= 10; --step) {
    const double rate = step / 100.0;
    const std::vector<double> alone = AloneTimes(gaps, items, rate);
    double cost = 0;
    for (const Gap& g : gaps) {
      if (g.us > 0) cost += std::abs(g.us - alone[g.item] / (1 - g.comm_share * (1 - rate))) / g.us;
    }
    if (best_cost < 0 || cost < best_cost * (1 - 1e-9)) best_cost = cost, best_rate = rate;
  }
  return best_rate;
}

// Finalize's work after the last collective ended (or backward, when it ended later): the
// copies out of the buckets.
double FinalizeWork(const IterationSample& it) {
  double last = it.backward_end_us;
  for (const AllreduceSample& a : it.allreduces) last = std::max(last, a.end_us);
  return std::max(0.0, it.finalize_end_us - last);
}

// Each iteration's slowest rank (longest forward + backward): a synchronous step goes at its
// pace, and which rank is slowest can change from one iteration to the next (ranks sharing
// cores take turns). Its iterations, and how many ranks there were.
std::pair<std::vector<IterationSample>, int> SlowestPerIteration(
    const std::vector<IterationSample>& all) {
  std::map<int, const IterationSample*> slowest;
  std::map<int, int> ranks;
  auto compute = [](const IterationSample* it) {
    return it->forward_us + it->backward_end_us - it->backward_start_us;
  };
  for (const IterationSample& it : all) {
    const IterationSample*& s = slowest[it.iteration];
    if (s == nullptr || compute(&it) > compute(s)) s = &it;
    ++ranks[it.rank];
  }
  std::vector<IterationSample> out;
  for (const auto& [number, it] : slowest) out.push_back(*it);
  return {out, static_cast<int>(ranks.size())};
}

// The copy speed from finalize's copies of every gradient, and the FLOP rate from the model's
// FLOPs (forward, and backward at twice forward) over its measured compute: what a comm hook's
// own work is priced at (step_model.h, HookComputeUs).
void SetMachineSpeeds(SimModel& model) {
  const double bytes = static_cast<double>(model.TotalBytes());
  model.copy_us_per_byte = bytes > 0 ? model.finalize_us / bytes : 0;
  double flops = 0;
  for (const SimParam& p : model.params) flops += 3 * p.forward_flops;
  const double us = model.forward_us + model.BackwardUs();
  model.flops_per_us = us > 0 ? flops / us : 0;
}

// How slowly iteration `number`'s allreduces that ran alone went, against the fit: the mean of
// their times over its price (1 when none ran alone).
double CommScale(const AllreduceSplit& split, int number, const LinearFit& alone) {
  double sum = 0;
  int count = 0;
  for (const auto& [it, a] : split.alone_runs) {
    const double price = alone.a_us + alone.b_us_per_byte * a->bytes;
    if (it->iteration != number || price <= 0) continue;
    sum += (a->end_us - a->start_us) / price, ++count;
  }
  return count > 0 ? sum / count : 1;
}

// Every iteration of `slowest` as a replay: the median model with that iteration's own times.
std::vector<Replay> Replays(const std::vector<IterationSample>& slowest, const SimModel& median,
                            double compute_rate, const AllreduceSplit& split,
                            const LinearFit& alone) {
  std::vector<Replay> replays;
  const size_t n = median.params.size();
  for (const IterationSample& it : slowest) {
    Replay r{.model = median, .comm_scale = CommScale(split, it.iteration, alone)};
    const std::vector<double> us = AloneTimes(IterationGaps(it, n), n + 1, compute_rate);
    for (size_t p = 0; p < n; ++p) r.model.params[p].backward_us = us[p];
    r.model.backward_tail_us = us[n];
    r.model.forward_us = it.forward_us - it.unused_search_us;
    r.model.unused_search_us = it.unused_search_us;
    r.model.optimizer_us = it.optimizer_us;
    if (it.finalize_end_us >= 0) r.model.finalize_us = FinalizeWork(it);
    replays.push_back(std::move(r));
  }
  return replays;
}

// Times so large they overflow (a trace's clock gone wrong) make no profile.
absl::Status CheckFinite(const SimModel& model, const LinearFit& alone, const std::string& what) {
  bool finite = std::isfinite(alone.a_us) && std::isfinite(alone.b_us_per_byte) &&
                std::isfinite(model.forward_us) && std::isfinite(model.backward_tail_us) &&
                std::isfinite(model.finalize_us) && std::isfinite(model.optimizer_us);
  for (const SimParam& p : model.params) finite = finite && std::isfinite(p.backward_us);
  if (finite) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat(what, ": its times overflow (is its clock sane?); no profile can be taken from it"));
}

}  // namespace

absl::StatusOr<Calibration> Calibrate(const trace::TraceView& view, const std::string& what,
                                      SimModel& model) {
  const size_t n = model.params.size();
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<IterationSample> samples,
                          IterationSamples(view, n, -1, what));
  const AllreduceSplit split = SplitAllreduces(samples);
  if (split.alone.empty() || split.alone.back().first <= 0) {
    return absl::InvalidArgumentError(
        StrCat(what,
               ": no bucket allreduce with its size ran after backward, so their cost alone "
               "cannot be measured (a PyTorch profiler trace needs --torch-plan for the sizes; "
               "a ddpkit trace needs a step whose last bucket is sent after backward)"));
  }
  Calibration c;
  // One size: the cost is taken as proportional to the bytes.
  const LinearFit alone = split.alone.size() > 1
                              ? LeastSquares(split.alone)
                              : LinearFit{0, split.alone[0].second / split.alone[0].first};
  c.network.name = "calibrated";
  c.network.measured[view.world_size] = alone;
  c.network.source =
      StrCat("calibrated: ", what, " (", split.alone_count, " bucket allreduces after backward)");
  c.interference.comm_rate = CommRate(split, alone);

  const auto [slowest, ranks] = SlowestPerIteration(samples);
  const std::vector<Gap> gaps = Gaps(slowest, n);
  const int both_ways = ItemsSeenBothWays(gaps, n + 1);
  c.interference.compute_rate = both_ways > 0 ? FitComputeRate(gaps, n + 1) : 1;
  const std::vector<double> alone_us = AloneTimes(gaps, n + 1, c.interference.compute_rate);
  for (size_t p = 0; p < n; ++p) model.params[p].backward_us = alone_us[p];
  model.backward_tail_us = alone_us[n];
  std::vector<double> forward, optimizer, finalize, search;
  for (const IterationSample& it : slowest) {
    forward.push_back(it.forward_us - it.unused_search_us), optimizer.push_back(it.optimizer_us);
    search.push_back(it.unused_search_us);
    if (it.finalize_end_us >= 0) finalize.push_back(FinalizeWork(it));
  }
  model.forward_us = Median(forward), model.optimizer_us = Median(optimizer);
  model.finalize_us = Median(finalize);
  model.unused_search_us = Median(search);
  SetMachineSpeeds(model);
  model.grad_ready_order.clear();
  for (const GradientSample& g : samples.back().gradients) {
    model.grad_ready_order.push_back(static_cast<size_t>(g.param));
  }
  model.order_estimated = false;
  model.compute_source =
      StrCat("calibrated: ", what, " (each gradient's backward alone; medians of ", slowest.size(),
             " iterations, each its slowest of ", ranks, " ranks)");
  DDPKIT_RETURN_IF_ERROR(CheckFinite(model, alone, what));
  c.replays = Replays(slowest, model, c.interference.compute_rate, split, alone);
  for (const Replay& r : c.replays) DDPKIT_RETURN_IF_ERROR(CheckFinite(r.model, alone, what));
  c.summary = absl::StrFormat(
      "an allreduce alone %.3f ms + %.3f ms per MB (%d after backward, %d size(s)); beside "
      "backward a collective runs at %.2fx its speed (%d collectives); backward runs at %.2fx "
      "beside a collective (%s); copies at %.2f GB/s (finalize's); each of the %d iterations "
      "replayed, the median step reported",
      alone.a_us / 1e3, alone.b_us_per_byte * 1e3, split.alone_count,
      static_cast<int>(split.alone.size()), c.interference.comm_rate,
      static_cast<int>(split.during.size()), c.interference.compute_rate,
      both_ways > 0 ? StrCat(both_ways, " gradient(s) seen both with and without one")
                    : "not measurable: no gradient was seen both with and without one; its "
                      "gaps are taken as measured",
      model.copy_us_per_byte > 0 ? 1e-3 / model.copy_us_per_byte : 0.0,
      static_cast<int>(slowest.size()));
  return c;
}

}  // namespace ddpkit::jobs::sim
