#include "tools/jobs/simulate/compute.h"

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "autograd/base/error.h"
#include "tools/jobs/simulate/trace_samples.h"
#include "tools/trace/parse_trace.h"

namespace ddpkit::jobs::sim {
namespace {

// Sustained mixed-precision training throughput, GFLOP/s: about 40% of each device's dense
// fp16/bf16 tensor-core peak (V100 125, A100 312, H100 SXM 989 TFLOP/s; NVIDIA's datasheets).
const std::map<std::string, double>& DevicePresets() {
  static const std::map<std::string, double> kPresets = {
      {"v100", 50e3}, {"a100", 125e3}, {"h100", 400e3}};
  return kPresets;
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
  DDPKIT_ASSIGN_OR_RETURN(const std::vector<IterationSample> samples,
                          IterationSamples(view, model.params.size(), view.ranks[0].rank, path));
  std::vector<std::vector<double>> gaps(model.params.size());
  std::vector<double> forward, optimizer, tail;
  for (const IterationSample& it : samples) {
    double last = it.backward_start_us;
    for (const GradientSample& g : it.gradients) {
      gaps[g.param].push_back(std::max(0.0, g.ready_us - last));
      last = g.ready_us;
    }
    forward.push_back(it.forward_us), optimizer.push_back(it.optimizer_us);
    tail.push_back(std::max(0.0, it.backward_end_us - last));
  }
  for (size_t p = 0; p < model.params.size(); ++p) model.params[p].backward_us = Median(gaps[p]);
  model.forward_us = Median(forward), model.optimizer_us = Median(optimizer);
  model.backward_tail_us = Median(tail);
  model.grad_ready_order.clear();
  for (const GradientSample& g : samples.back().gradients) {
    model.grad_ready_order.push_back(static_cast<size_t>(g.param));
  }
  model.order_estimated = false;
  model.compute_source =
      StrCat("measured: ", path, " (medians of ", samples.size(), " iterations, rank 0)");
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
  if (model.flops_unknown) {
    return absl::InvalidArgumentError(
        StrCat("--compute ", spec, ": ", model.name,
               " has no FLOP count to run at a throughput; time it instead: --calibrate TRACE (or "
               "--compute trace=TRACE) from `ddpkit train --model ",
               model.name, " --trace TRACE`"));
  }
  ApplyThroughput(model, gflops);
  if (!absl::StartsWith(spec, "gflops=")) model.compute_source += StrCat(" (preset ", spec, ")");
  return absl::OkStatus();
}

}  // namespace ddpkit::jobs::sim
