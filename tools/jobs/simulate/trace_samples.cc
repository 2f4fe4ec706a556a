#include "tools/jobs/simulate/trace_samples.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "autograd/base/error.h"
#include "tools/jobs/job.h"

namespace ddpkit::jobs::sim {
namespace {

// DDP's warm-up, left out: each DDP's first iteration (iteration 0, or the one before a
// "rebuild" instant), on the initial plan, and the iteration after it (the rebuild's own; 1
// where DDP keeps its plan, under find_unused_parameters). That second one runs new buckets,
// and a backend's first calls at their sizes still allocate: on 2 mpi ranks a 7.41 MB allreduce
// took 19.7 ms there and 2.0 from the next iteration on; under find_unused_parameters an 8.44 MB
// one ran after backward only there (16.3 ms, 3.1-3.6 beside backward after), and its price,
// the only one of that size, put every plan's allreduces at up to five times their cost.
std::set<int> WarmUpIterations(const trace::RankView& rank) {
  std::set<int> skip = {0, 1};
  for (const trace::TraceItem& i : rank.instants) {
    if (i.name == "rebuild") skip.insert({i.iteration - 1, i.iteration});
  }
  return skip;
}

// `params`: the model's parameter count, so no more buckets than that (a bad trace's bucket
// number must not size a vector).
std::map<int, IterationSample> Collect(const trace::RankView& rank, size_t params) {
  std::map<int, IterationSample> its;
  std::set<int> with_backward;
  for (const trace::TraceItem& p : rank.phases) {
    IterationSample& it = its[p.iteration];
    if (p.name == "forward") {
      it.forward_us += p.end_us - p.start_us;
      if (it.forward_start_us < 0 || p.start_us < it.forward_start_us) {
        it.forward_start_us = p.start_us;
      }
    }
    if (p.name == "optimizer") it.optimizer_us += p.end_us - p.start_us;
    if (p.name == "finalize") it.finalize_end_us = p.end_us;
    if (p.name == "unused search") it.unused_search_us += p.end_us - p.start_us;
    if (p.name == "backward") {
      it.backward_start_us = p.start_us, it.backward_end_us = p.end_us;
      with_backward.insert(p.iteration);
    }
  }
  for (const trace::TraceItem& h : rank.hooks) {
    its[h.iteration].gradients.push_back({h.param, h.bucket, h.start_us});
  }
  for (const trace::TraceItem& c : rank.collectives) {
    if (c.purpose != "bucket" || c.shadow || !c.ok) continue;
    its[c.iteration].allreduces.push_back({.bucket = c.bucket,
                                           .bytes = static_cast<double>(c.bytes),
                                           .start_us = c.start_us,
                                           .end_us = std::max(c.start_us, c.end_us),
                                           .rank_start_us = c.start_us,
                                           .queued_us = c.queued_us > 0 ? c.queued_us : -1});
  }
  for (const trace::TraceItem& i : rank.instants) {
    if (i.bucket < 0 || static_cast<size_t>(i.bucket) >= params) continue;
    if (i.event != "launched" && i.event != "reduced") continue;
    std::vector<BucketSample>& buckets = its[i.iteration].buckets;
    if (buckets.size() <= static_cast<size_t>(i.bucket)) buckets.resize(i.bucket + 1);
    BucketSample& b = buckets[i.bucket];
    b.bucket = i.bucket;
    (i.event == "launched" ? b.launched_us : b.reduced_us) = i.start_us;
  }
  for (auto it = its.begin(); it != its.end();) {
    it = with_backward.count(it->first) ? std::next(it) : its.erase(it);
  }
  return its;
}

// A collective runs once every rank has started it: each allreduce's start is moved to the
// latest rank's, among the ranks the view holds (the k-th bucket allreduce of an iteration is
// the same collective on every rank). The time before it is waiting for a peer, not sending.
void StartWhenAllHave(std::vector<IterationSample>& samples) {
  std::map<std::pair<int, size_t>, double> latest;
  for (const IterationSample& it : samples) {
    for (size_t k = 0; k < it.allreduces.size(); ++k) {
      double& at = latest[{it.iteration, k}];
      at = std::max(at, it.allreduces[k].start_us);
    }
  }
  for (IterationSample& it : samples) {
    for (size_t k = 0; k < it.allreduces.size(); ++k) {
      AllreduceSample& a = it.allreduces[k];
      a.start_us = std::min(a.end_us, latest[{it.iteration, k}]);
    }
  }
}

// A backward pass's hooks name every parameter once (a hook seen twice is another pass).
bool EachOnce(const std::vector<GradientSample>& gradients, size_t params) {
  std::vector<bool> seen(params, false);
  for (const GradientSample& g : gradients) {
    if (seen[g.param]) return false;
    seen[g.param] = true;
  }
  return true;
}

}  // namespace

double BucketCompletedUs(const IterationSample& it, const AllreduceSample& a) {
  const bool known = a.bucket >= 0 && static_cast<size_t>(a.bucket) < it.buckets.size() &&
                     it.buckets[a.bucket].reduced_us >= a.end_us;
  return known ? it.buckets[a.bucket].reduced_us : -1;
}

double Median(std::vector<double> v) {
  std::erase_if(v, [](double x) { return !std::isfinite(x); });  // a NaN would break the sort
  const size_t n = v.size();
  if (n == 0 || n % 2 == 1) return jobs::Median(std::move(v));
  std::nth_element(v.begin(), v.begin() + n / 2, v.end());
  const double upper = v[n / 2];
  return (*std::max_element(v.begin(), v.begin() + n / 2) + upper) / 2;
}

double Spread(std::vector<double> v) {
  std::erase_if(v, [](double x) { return !std::isfinite(x); });
  if (v.size() < 4) return 0;
  std::sort(v.begin(), v.end());
  const double median = v[v.size() / 2];
  return median != 0 ? (v[v.size() * 3 / 4] - v[v.size() / 4]) / median : 0;
}

absl::StatusOr<std::vector<IterationSample>> IterationSamples(const trace::TraceView& view,
                                                              size_t params, int rank,
                                                              const std::string& what) {
  std::vector<IterationSample> out;
  for (const trace::RankView& r : view.ranks) {
    if (rank >= 0 && r.rank != rank) continue;
    const std::set<int> skip = WarmUpIterations(r);
    for (auto& [number, it] : Collect(r, params)) {
      if (skip.count(number) || it.gradients.size() != params) continue;
      for (const GradientSample& g : it.gradients) {
        if (g.param < 0) {
          return absl::InvalidArgumentError(
              StrCat(what, ": rank ", r.rank, " iteration ", number,
                     " has a gradient no parameter is named for (a PyTorch profiler trace needs "
                     "--torch-plan, DDP's logging data, to name them)"));
        }
        if (static_cast<size_t>(g.param) >= params) {
          return absl::InvalidArgumentError(StrCat(what, ": rank ", r.rank, " iteration ", number,
                                                   " has a gradient of parameter ", g.param,
                                                   "; the model has ", params));
        }
      }
      if (!EachOnce(it.gradients, params)) continue;
      std::stable_sort(it.gradients.begin(), it.gradients.end(),
                       [](const auto& a, const auto& b) { return a.ready_us < b.ready_us; });
      it.rank = r.rank, it.iteration = number;
      out.push_back(std::move(it));
    }
  }
  StartWhenAllHave(out);
  if (out.empty()) {
    return absl::InvalidArgumentError(StrCat(
        what,
        ": no iteration after DDP's first two (its warm-up) with one gradient hook per parameter (",
        params,
        ") — is it this model's trace? (a PyTorch profiler trace needs --torch-plan to name its "
        "gradients)"));
  }
  return out;
}

}  // namespace ddpkit::jobs::sim
