#include "tools/jobs/simulate/compute.h"

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "autograd/base/error.h"
#include "tools/trace/trace_file.h"

namespace ddpkit::jobs::sim {
namespace {

// Sustained mixed-precision training throughput, GFLOP/s: about 40% of each device's dense
// fp16/bf16 tensor-core peak (V100 125, A100 312, H100 SXM 989 TFLOP/s; NVIDIA's datasheets).
const std::map<std::string, double>& DevicePresets() {
  static const std::map<std::string, double> kPresets = {
      {"v100", 50e3}, {"a100", 125e3}, {"h100", 400e3}};
  return kPresets;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct IterationTimes {
  double forward = 0, optimizer = 0, backward_start = -1, backward_end = 0;
  std::vector<const trace::TraceItem*> hooks;
};

std::map<int, IterationTimes> ByIteration(const trace::RankView& rank) {
  std::map<int, IterationTimes> its;
  for (const trace::TraceItem& p : rank.phases) {
    IterationTimes& it = its[p.iteration];
    if (p.name == "forward") it.forward += p.end_us - p.start_us;
    if (p.name == "optimizer") it.optimizer += p.end_us - p.start_us;
    if (p.name == "backward") it.backward_start = p.start_us, it.backward_end = p.end_us;
  }
  for (const trace::TraceItem& h : rank.hooks) its[h.iteration].hooks.push_back(&h);
  for (auto& [i, it] : its) {
    std::sort(it.hooks.begin(), it.hooks.end(),
              [](auto* a, auto* b) { return a->start_us < b->start_us; });
  }
  return its;
}

}  // namespace

void ApplyThroughput(SimModel& model, double gflops) {
  const double flops_per_us = gflops * 1e3;
  model.forward_us = 0;
  for (SimParam& p : model.params) {
    model.forward_us += p.forward_flops / flops_per_us;
    p.backward_us = 2 * p.forward_flops / flops_per_us;
  }
  model.backward_tail_us = model.optimizer_us = 0;
  model.compute_source = StrCat("FLOPs at ", gflops, " GFLOP/s (backward = 2 x forward)");
  if (!model.flops_source.empty()) model.compute_source += StrCat("; ", model.flops_source);
}

absl::Status ApplyTrace(SimModel& model, const std::string& path) {
  DDPKIT_ASSIGN_OR_RETURN(const trace::TraceView view, trace::ReadTraceFile(path));
  if (view.ranks.empty()) return absl::InvalidArgumentError(StrCat(path, ": no rank"));
  const size_t n = model.params.size();
  std::vector<std::vector<double>> gaps(n);
  std::vector<double> forward, optimizer, tail;
  std::vector<size_t> order;
  for (const auto& [iteration, it] : ByIteration(view.ranks[0])) {
    // Iteration 0 is the one before DDP's rebuild; only full backward passes count.
    if (iteration < 1 || it.backward_start < 0 || it.hooks.size() != n) continue;
    double last = it.backward_start;
    order.clear();
    for (const trace::TraceItem* h : it.hooks) {
      if (h->param < 0 || static_cast<size_t>(h->param) >= n) {
        return absl::InvalidArgumentError(
            StrCat(path, ": a hook names parameter ", h->param, "; the model has ", n));
      }
      gaps[h->param].push_back(std::max(0.0, h->start_us - last));
      last = h->start_us;
      order.push_back(static_cast<size_t>(h->param));
    }
    forward.push_back(it.forward), optimizer.push_back(it.optimizer);
    tail.push_back(std::max(0.0, it.backward_end - last));
  }
  if (forward.empty()) {
    return absl::InvalidArgumentError(StrCat(path,
                                             ": no iteration after the first with one hook "
                                             "per parameter (",
                                             n, ") — is it this model's trace?"));
  }
  for (size_t p = 0; p < n; ++p) model.params[p].backward_us = Median(gaps[p]);
  model.forward_us = Median(forward), model.optimizer_us = Median(optimizer);
  model.backward_tail_us = Median(tail);
  model.grad_ready_order = order, model.order_estimated = false;
  model.compute_source =
      StrCat("measured: ", path, " (medians of ", forward.size(), " iterations, rank 0)");
  return absl::OkStatus();
}

absl::Status ApplyCompute(SimModel& model, const std::string& spec) {
  if (absl::StartsWith(spec, "trace=")) return ApplyTrace(model, spec.substr(6));
  double gflops = 0;
  if (absl::StartsWith(spec, "gflops=")) {
    if (!absl::SimpleAtod(spec.substr(7), &gflops) || gflops <= 0) {
      return absl::InvalidArgumentError(StrCat("--compute: bad throughput in '", spec, "'"));
    }
  } else if (auto it = DevicePresets().find(spec); it != DevicePresets().end()) {
    gflops = it->second;
  } else {
    return absl::InvalidArgumentError(
        StrCat("--compute: '", spec, "' is none of gflops=X, trace=FILE, v100, a100, h100"));
  }
  ApplyThroughput(model, gflops);
  if (!absl::StartsWith(spec, "gflops=")) model.compute_source += StrCat(" (preset ", spec, ")");
  return absl::OkStatus();
}

}  // namespace ddpkit::jobs::sim
