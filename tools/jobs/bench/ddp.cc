// `ddpkit bench ddp`: what DDP costs per step, against references measured in the same run.
//  * overhead: DDP forward+backward vs the same model's plain forward+backward on this rank
//    (on a world of one this is the reducer's own cost: hooks, bucket copies, finalize);
//  * overlap: exposed communication (DDP step - local step) against the total allreduce time
//    the reducer measured: what backward hid is the difference;
//  * bucket-cap sweep: step time vs bucket_cap_mb, as in the DDP paper (Li et al., 2020).
#include <algorithm>
#include <chrono>
#include <functional>

#include "autograd/ops.h"
#include "reducer/distributed_data_parallel.h"
#include "tools/jobs/bench/bench.h"
#include "tools/trace/session.h"

namespace ddpkit::jobs {
namespace {

using Clock = std::chrono::steady_clock;

struct StepTimes {
  double step_ms = 0, reference_ms = 0;
};

double TimeMs(const std::function<void()>& f) {
  const auto start = Clock::now();
  f();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Median milliseconds of `step` and of `reference` over `iters` runs each, interleaved so that
// both see the same machine state, after `warmup` untimed runs. The slowest rank's medians (a
// MAX allreduce), since a synchronous step is as slow as its slowest rank.
absl::StatusOr<StepTimes> MedianMs(comm::ProcessGroup& group, int warmup, int iters,
                                   const std::function<void()>& step,
                                   const std::function<void()>& reference) {
  for (int i = 0; i < warmup; ++i) {
    step();
    reference();
  }
  std::vector<double> ms, ref_ms;
  for (int i = 0; i < iters; ++i) {
    ms.push_back(TimeMs(step));
    ref_ms.push_back(TimeMs(reference));
  }
  Tensor slowest = Tensor::FromVector<double>({Median(ms), Median(ref_ms)}, {2});
  comm::ScopedCollectiveTag tag({.purpose = "job"});
  DDPKIT_RETURN_IF_ERROR(group.Allreduce(slowest, comm::ReduceOp::kMax)->Wait());
  return StepTimes{slowest.at(0), slowest.at(1)};
}

// The DDP steps' place in the rank's trace (--trace): each step is the next iteration.
struct Tracing {
  trace::TraceRecorder* recorder = nullptr;
  int next_iteration = 0;
};

// Forward + backward of `model` on the batch; gradients zeroed first, to none or in place.
// Not the jobs' TrainingStep (training_loop.h): no optimizer steps, the zeroing is what is
// measured, and the same closure times a local model without DDP.
// Traced when `tracing` has a recorder (the DDP steps, not the local reference).
std::function<void()> StepOf(nn::Module& model, const BenchBatch& batch, bool zero_in_place,
                             Tracing* tracing = nullptr) {
  trace::TraceRecorder* recorder = tracing != nullptr ? tracing->recorder : nullptr;
  return [&model, &batch, zero_in_place, tracing, recorder] {
    if (recorder != nullptr) recorder->SetIteration(tracing->next_iteration++);
    for (const Tensor& p : model.Parameters()) {
      if (!zero_in_place) {
        p.set_grad(Tensor());
      } else if (p.grad().defined()) {
        p.grad().Zero();
      }
    }
    Tensor loss;
    {
      trace::ScopedSpan forward(recorder, trace::ComputeKind::kForward);
      loss = BenchLoss(model, batch);
    }
    trace::ScopedSpan backward(recorder, trace::ComputeKind::kBackward);
    loss.Backward();
  };
}

// The local step as reference, and DDP built from `options` around an identical model.
struct Measured {
  StepTimes times;
  reducer::DdpLoggingData log;
};

absl::StatusOr<Measured> MeasureDdp(const BenchDdpConfig& config, const models::ModelSpec& spec,
                                    const BenchBatch& batch, comm::ProcessGroup& group,
                                    reducer::DdpOptions options, bool zero_in_place,
                                    const std::string& label, Tracing& tracing) {
  auto local = models::MakeModel(spec, 0);
  auto model = models::MakeModel(spec, 0);
  options.pytorch_version = config.pytorch_version;
  DDPKIT_ASSIGN_OR_RETURN(auto ddp,
                          reducer::DistributedDataParallel::Create(model, group, options));
  if (tracing.recorder != nullptr) {
    ddp->reducer().SetTraceObserver(tracing.recorder);
    tracing.recorder->Marker(label);
  }
  const int warmup = std::max(2, config.warmup_iters);  // the rebuild happens in warm-up
  DDPKIT_ASSIGN_OR_RETURN(StepTimes times, MedianMs(group, warmup, config.iters,
                                                    StepOf(*ddp, batch, zero_in_place, &tracing),
                                                    StepOf(*local, batch, zero_in_place)));
  return Measured{times, ddp->LoggingData()};
}

absl::StatusOr<BenchDdpReport> BenchOnRank(const BenchDdpConfig& config,
                                           const models::ModelSpec& spec, comm::ProcessGroup& group,
                                           trace::TraceSession& trace) {
  // Every measurement runs warm-up and timed DDP steps, each a traced iteration: per step a few
  // spans, and per parameter a hook and at most one bucket ready, launched and reduced.
  const size_t steps =
      (2 + config.bucket_caps.size()) * (std::max(2, config.warmup_iters) + config.iters);
  const auto params = static_cast<size_t>(spec.parameter_tensors);
  Tracing tracing;
  DDPKIT_ASSIGN_OR_RETURN(tracing.recorder,
                          trace.BeginRank(group, {.compute = steps * (4 * params + 8) + 1024,
                                                  .collectives = steps * (params + 8) + 1024}));
  const BenchBatch batch = MakeBenchBatch(spec, config.batch_size, group.rank());

  BenchDdpReport report;
  DDPKIT_ASSIGN_OR_RETURN(Measured plain, MeasureDdp(config, spec, batch, group, {}, false,
                                                     "DDP step, default options", tracing));
  report.set_local_step_ms(plain.times.reference_ms);
  report.set_ddp_step_ms(plain.times.step_ms);
  report.set_buckets(plain.log.rebuilt_buckets_size());
  report.set_comm_ms(plain.log.avg_backward_comm_time() / 1e6);
  report.set_overlap_ms(plain.log.avg_backward_compute_comm_overlap_time() / 1e6);
  report.set_parameter_tensors(plain.log.num_parameter_tensors());
  report.set_parameter_bytes(plain.log.total_parameter_size_bytes());
  // .grad stays the bucket view when zeroed in place, so no copy goes in or out.
  DDPKIT_ASSIGN_OR_RETURN(Measured views,
                          MeasureDdp(config, spec, batch, group, {.gradient_as_bucket_view = true},
                                     true, "DDP step, bucket views, zeroed in place", tracing));
  report.set_view_ddp_step_ms(views.times.step_ms);
  report.set_view_local_step_ms(views.times.reference_ms);
  for (double cap : config.bucket_caps) {
    DDPKIT_ASSIGN_OR_RETURN(Measured swept,
                            MeasureDdp(config, spec, batch, group, {.bucket_cap_mb = cap}, false,
                                       StrCat("bucket cap ", cap, " MiB"), tracing));
    BucketCapPoint& point = *report.add_sweep();
    point.set_bucket_cap_mb(cap);
    point.set_buckets(swept.log.rebuilt_buckets_size());
    point.set_step_ms(swept.times.step_ms);
    point.set_local_step_ms(swept.times.reference_ms);
  }
  report.set_backend(std::string(group.backend_name()));
  report.set_world_size(group.size());
  report.set_rank(group.rank());
  trace.EndRank(group, plain.log);
  return report;
}

}  // namespace

absl::StatusOr<BenchDdpReport> BenchDdp(const BenchDdpConfig& config) {
  DDPKIT_ASSIGN_OR_RETURN(const models::ModelSpec spec,
                          ParseBenchModel(config.model, config.batch_size, config.world));
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--iters", config.iters, 1));
  for (double cap : config.bucket_caps) {
    DDPKIT_RETURN_IF_ERROR(RequirePositive("--bucket-caps: each cap", cap));
  }
  trace::TraceSession trace(config.trace_path, "bench ddp", config.world);
  DDPKIT_ASSIGN_OR_RETURN(
      BenchDdpReport report,
      RunOnEveryRank<BenchDdpReport>(config.world, [&](comm::ProcessGroup& group) {
        return BenchOnRank(config, spec, group, trace);
      }));
  DDPKIT_RETURN_IF_ERROR(trace.Write().status());
  report.set_model(spec.text);
  report.set_pytorch_rules(reducer::RulesFollowed(config.pytorch_version));
  report.set_batch_size(config.batch_size);
  report.set_iters(config.iters);
  report.set_warmup_iters(std::max(2, config.warmup_iters));
  return report;
}

}  // namespace ddpkit::jobs
