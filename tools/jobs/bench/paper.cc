// `ddpkit bench paper`: the DDP paper's experiments (Li et al., "PyTorch Distributed: Experiences
// on Accelerating Data Parallel Training", VLDB 2020, §5) at this machine's scale:
//  1. the step's latency breakdown — forward, backward compute, exposed communication, optimizer
//     — with DDP's overlap (buckets allreduced while backward runs) and without it (backward
//     under no_sync, then every gradient in one allreduce);
//  2. step time against bucket_cap_mb (0: one bucket per parameter);
//  3. skipping synchronisation: no_sync for K - 1 of every K micro-batches.
// Every figure is the slowest rank's median: a synchronous step is as slow as its slowest rank.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "autograd/base/file_util.h"
#include "autograd/nn/optim.h"
#include "autograd/ops.h"
#include "comm/world/thread_budget.h"
#include "reducer/distributed_data_parallel.h"
#include "reducer/extras/fused_allreduce.h"
#include "tools/jobs/bench/bench.h"

namespace ddpkit::jobs {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// What every experiment on one rank shares: the model and its rows, the same every step.
struct RankData {
  const models::ModelSpec& spec;
  BenchBatch batch;
};

// A fresh model (seed 0: the same on every rank) in DDP with `options`, and its SGD.
struct Trainee {
  std::shared_ptr<reducer::DistributedDataParallel> ddp;
  std::unique_ptr<Sgd> sgd;
};

absl::StatusOr<Trainee> MakeTrainee(const RankData& data, comm::ProcessGroup& group,
                                    const reducer::DdpOptions& options) {
  std::shared_ptr<nn::Module> model = models::MakeModel(data.spec, 0);
  Trainee t;
  DDPKIT_ASSIGN_OR_RETURN(t.ddp, reducer::DistributedDataParallel::Create(model, group, options));
  t.sgd = std::make_unique<Sgd>(model->Parameters(), SgdOptions{.lr = 0.01});
  return t;
}

// One step's phases in milliseconds.
struct Phases {
  double forward = 0, backward = 0, allreduce = 0, optimizer = 0, step = 0;
};

// Not the jobs' TrainingStep (training_loop.h): each phase has its own clock, and the
// gradients are zeroed after the step, inside the optimizer's time, as the paper measures.
// Zero the gradients, forward, backward, optimizer. With `fused`, backward runs under no_sync
// and the gradients are then averaged in one allreduce (timed as `allreduce`); without, DDP's
// buckets are allreduced during backward and its last wait is inside `backward`. With `sync`
// false, under no_sync with no optimizer step (a micro-batch that only accumulates).
absl::StatusOr<Phases> Step(Trainee& t, const RankData& data, comm::ProcessGroup& group,
                            reducer::FusedGradientAllreduce* fused, bool sync = true) {
  Phases p;
  // no_sync must cover the forward too: DDP's forward is where a synced backward is prepared.
  std::optional<reducer::DistributedDataParallel::NoSyncGuard> no_sync;
  if (fused != nullptr || !sync) no_sync.emplace(*t.ddp);
  const auto start = Clock::now();
  Tensor loss = BenchLoss(*t.ddp, data.batch);
  p.forward = MsSince(start);
  auto mark = Clock::now();
  loss.Backward();
  p.backward = MsSince(mark);
  no_sync.reset();
  if (fused != nullptr && sync) {
    mark = Clock::now();
    DDPKIT_RETURN_IF_ERROR(fused->Run(group));
    p.allreduce = MsSince(mark);
  }
  if (sync) {
    mark = Clock::now();
    t.sgd->Step();
    t.sgd->ZeroGrad();
    p.optimizer = MsSince(mark);
  }
  p.step = MsSince(start);
  return p;
}

// The smallest and largest of `values` (the spread a picture's whisker shows).
std::pair<double, double> Range(const std::vector<double>& values) {
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return {*lo, *hi};
}

// The largest of each value over all ranks.
absl::StatusOr<std::vector<double>> Slowest(comm::ProcessGroup& group, std::vector<double> values) {
  Tensor t = Tensor::FromVector<double>(values, {static_cast<int64_t>(values.size())});
  comm::ScopedCollectiveTag tag({.purpose = "job"});
  DDPKIT_RETURN_IF_ERROR(group.Allreduce(t, comm::ReduceOp::kMax)->Wait());
  return t.ToDoubles();
}

// DDP's own timings summed so far (its logging data keeps running averages): the difference
// of two readings is the exposed and total communication of the steps between them.
struct CommTotals {
  double exposed_ms = 0, comm_ms = 0;
  int64_t iterations = 0;
  static CommTotals Of(const reducer::DistributedDataParallel& ddp) {
    const reducer::DdpLoggingData log = ddp.LoggingData();
    const int64_t n = log.num_timed_iterations();
    return {log.avg_backward_exposed_comm_time() * 1e-6 * n,
            log.avg_backward_comm_time() * 1e-6 * n, n};
  }
};

// Experiment 1 in one mode: `iters` timed steps after the warm-up (which holds the rebuild).
absl::StatusOr<PhaseBreakdown> Breakdown(const BenchPaperConfig& config, const RankData& data,
                                         comm::ProcessGroup& group, bool overlap) {
  DDPKIT_ASSIGN_OR_RETURN(Trainee t,
                          MakeTrainee(data, group, {.pytorch_version = config.pytorch_version}));
  std::unique_ptr<reducer::FusedGradientAllreduce> fused;
  if (!overlap) {
    fused = std::make_unique<reducer::FusedGradientAllreduce>(t.ddp->module().NamedParameters());
  }
  for (int i = 0; i < config.warmup_iters; ++i) {
    DDPKIT_RETURN_IF_ERROR(Step(t, data, group, fused.get()).status());
  }
  const CommTotals before = CommTotals::Of(*t.ddp);
  std::vector<double> forward, backward, allreduce, optimizer, step;
  for (int i = 0; i < config.iters; ++i) {
    DDPKIT_ASSIGN_OR_RETURN(Phases p, Step(t, data, group, fused.get()));
    forward.push_back(p.forward);
    backward.push_back(p.backward);
    allreduce.push_back(p.allreduce);
    optimizer.push_back(p.optimizer);
    step.push_back(p.step);
  }
  double exposed = Median(allreduce), comm = exposed;  // no overlap: all of it is exposed
  if (overlap) {
    const CommTotals after = CommTotals::Of(*t.ddp);
    const double n = std::max<int64_t>(1, after.iterations - before.iterations);
    exposed = (after.exposed_ms - before.exposed_ms) / n;
    comm = (after.comm_ms - before.comm_ms) / n;
  }
  // DDP's wait for its last buckets happens inside backward: what is left is computation.
  const double backward_compute = std::max(0.0, Median(backward) - (overlap ? exposed : 0.0));
  const auto [step_min, step_max] = Range(step);
  DDPKIT_ASSIGN_OR_RETURN(
      std::vector<double> slowest,
      Slowest(group, {Median(forward), backward_compute, exposed, Median(optimizer), Median(step),
                      comm, step_min, step_max}));
  PhaseBreakdown b;
  b.set_mode(overlap ? "overlap" : "no overlap");
  b.set_forward_ms(slowest[0]);
  b.set_backward_compute_ms(slowest[1]);
  b.set_exposed_comm_ms(slowest[2]);
  b.set_optimizer_ms(slowest[3]);
  b.set_step_ms(slowest[4]);
  b.set_comm_ms(slowest[5]);
  b.set_step_min_ms(slowest[6]);
  b.set_step_max_ms(slowest[7]);
  return b;
}

// Experiment 2 at one cap. 0 stands for one bucket per parameter: a one-byte cap, the first
// bucket's included (DDP refuses a cap of 0; a bucket closes once it holds at least the cap).
// From PyTorch 2.4 the given cap is the first bucket's too; before, the first one is set apart.
absl::StatusOr<CapPoint> AtCap(const BenchPaperConfig& config, const RankData& data,
                               comm::ProcessGroup& group, double cap) {
  constexpr double kOneByte = 1.0 / (1 << 20);
  reducer::DdpOptions options{.pytorch_version = config.pytorch_version,
                              .bucket_cap_mb = cap > 0 ? cap : kOneByte};
  if (cap == 0 &&
      !reducer::Follows(config.pytorch_version, reducer::DdpRule::kGivenCapCapsFirstBucket)) {
    options.first_bucket_mb = kOneByte;
  }
  DDPKIT_ASSIGN_OR_RETURN(Trainee t, MakeTrainee(data, group, options));
  for (int i = 0; i < std::max(2, config.warmup_iters); ++i) {  // the rebuild is in the 2nd
    DDPKIT_RETURN_IF_ERROR(Step(t, data, group, nullptr).status());
  }
  const CommTotals before = CommTotals::Of(*t.ddp);
  std::vector<double> step;
  for (int i = 0; i < config.iters; ++i) {
    DDPKIT_ASSIGN_OR_RETURN(Phases p, Step(t, data, group, nullptr));
    step.push_back(p.step);
  }
  const CommTotals after = CommTotals::Of(*t.ddp);
  const double n = std::max<int64_t>(1, after.iterations - before.iterations);
  const auto [step_min, step_max] = Range(step);
  DDPKIT_ASSIGN_OR_RETURN(std::vector<double> slowest,
                          Slowest(group, {Median(step), (after.exposed_ms - before.exposed_ms) / n,
                                          step_min, step_max}));
  CapPoint point;
  point.set_bucket_cap_mb(cap);
  point.set_buckets(t.ddp->LoggingData().rebuilt_buckets_size());
  point.set_step_ms(slowest[0]);
  point.set_exposed_comm_ms(slowest[1]);
  point.set_step_min_ms(slowest[2]);
  point.set_step_max_ms(slowest[3]);
  return point;
}

// Experiment 3 at one K: `iters` rounds of K micro-batches, the last of each synced.
absl::StatusOr<SyncPoint> AtSyncEvery(const BenchPaperConfig& config, const RankData& data,
                                      comm::ProcessGroup& group, int k) {
  DDPKIT_ASSIGN_OR_RETURN(Trainee t,
                          MakeTrainee(data, group, {.pytorch_version = config.pytorch_version}));
  auto round = [&]() -> absl::Status {
    for (int i = 0; i < k; ++i) {
      DDPKIT_RETURN_IF_ERROR(Step(t, data, group, nullptr, /*sync=*/i + 1 == k).status());
    }
    return absl::OkStatus();
  };
  for (int i = 0; i < std::max(2, config.warmup_iters); ++i) DDPKIT_RETURN_IF_ERROR(round());
  std::vector<double> per_iteration;
  for (int i = 0; i < config.iters; ++i) {
    const auto start = Clock::now();
    DDPKIT_RETURN_IF_ERROR(round());
    per_iteration.push_back(MsSince(start) / k);
  }
  const auto [lo, hi] = Range(per_iteration);
  DDPKIT_ASSIGN_OR_RETURN(std::vector<double> slowest,
                          Slowest(group, {Median(per_iteration), lo, hi}));
  SyncPoint point;
  point.set_sync_every(k);
  point.set_iteration_ms(slowest[0]);
  point.set_iteration_min_ms(slowest[1]);
  point.set_iteration_max_ms(slowest[2]);
  return point;
}

// Tells the user on rank 0 which of the run's measurements starts now.
class Progress {
 public:
  Progress(const BenchPaperConfig& config, int rank)
      : config_(config),
        total_(2 + static_cast<int>(config.bucket_caps.size() + config.sync_every.size())),
        on_(rank == 0 && config.progress != nullptr) {}
  void Next(const std::string& what) {
    if (on_) config_.progress(StrCat(++done_, "/", total_, " ", what));
  }

 private:
  const BenchPaperConfig& config_;
  const int total_;
  const bool on_;
  int done_ = 0;
};

absl::StatusOr<BenchPaperReport> PaperOnRank(const BenchPaperConfig& config,
                                             const models::ModelSpec& spec,
                                             comm::ProcessGroup& group) {
  const RankData data{spec, MakeBenchBatch(spec, config.batch_size, group.rank())};

  BenchPaperReport report;
  Progress progress(config, group.rank());
  for (bool overlap : {true, false}) {
    progress.Next(StrCat("latency breakdown, ", overlap ? "with" : "without", " overlap"));
    DDPKIT_ASSIGN_OR_RETURN(*report.add_breakdown(), Breakdown(config, data, group, overlap));
  }
  report.set_overlap_speedup(report.breakdown(1).step_ms() / report.breakdown(0).step_ms() - 1);
  for (double cap : config.bucket_caps) {
    progress.Next(StrCat("step time at bucket_cap_mb ", cap));
    DDPKIT_ASSIGN_OR_RETURN(*report.add_caps(), AtCap(config, data, group, cap));
  }
  for (int k : config.sync_every) {
    progress.Next(StrCat("an allreduce every ", k, " micro-batch", k == 1 ? "" : "es"));
    DDPKIT_ASSIGN_OR_RETURN(SyncPoint point, AtSyncEvery(config, data, group, k));
    point.set_speedup(
        report.sync_size() == 0 ? 1.0 : report.sync(0).iteration_ms() / point.iteration_ms());
    *report.add_sync() = point;
  }
  DDPKIT_ASSIGN_OR_RETURN(Trainee probe,
                          MakeTrainee(data, group, {.pytorch_version = config.pytorch_version}));
  const reducer::DdpLoggingData log = probe.ddp->LoggingData();
  report.set_parameter_tensors(log.num_parameter_tensors());
  report.set_parameter_bytes(log.total_parameter_size_bytes());
  report.set_backend(std::string(group.backend_name()));
  report.set_world_size(group.size());
  report.set_rank(group.rank());
  return report;
}

absl::Status Validate(const BenchPaperConfig& config) {
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--iters", config.iters, 1));
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--warmup-iters", config.warmup_iters, 0));
  for (double cap : config.bucket_caps) {
    DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--bucket-caps: each cap", cap, 0));
  }
  if (config.sync_every.empty() || config.sync_every.front() != 1) {
    return absl::InvalidArgumentError(
        "--sync-every must start with 1 (every micro-batch synced: the reference)");
  }
  for (int k : config.sync_every) {
    DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--sync-every: each K", k, 1));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BenchPaperReport> BenchPaper(const BenchPaperConfig& config) {
  DDPKIT_ASSIGN_OR_RETURN(const models::ModelSpec spec,
                          ParseBenchModel(config.model, config.batch_size, config.world));
  DDPKIT_RETURN_IF_ERROR(Validate(config));
  if (!config.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(config.out_dir, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          StrCat("cannot create --out directory '", config.out_dir, "': ", ec.message()));
    }
  }
  DDPKIT_ASSIGN_OR_RETURN(const comm::ThreadBudget budget, comm::ResolveThreadBudget(config.world));
  DDPKIT_ASSIGN_OR_RETURN(
      BenchPaperReport report,
      RunOnEveryRank<BenchPaperReport>(config.world, [&](comm::ProcessGroup& group) {
        return PaperOnRank(config, spec, group);
      }));
  report.set_model(spec.text);
  report.set_pytorch_rules(reducer::RulesFollowed(config.pytorch_version));
  report.set_batch_size(config.batch_size);
  report.set_iters(config.iters);
  report.set_thread_budget(budget.ToString());
  if (!config.out_dir.empty() && report.rank() == 0) {
    report.set_svg_path(config.out_dir + "/paper.svg");
    DDPKIT_RETURN_IF_ERROR(WriteFileAtomically(report.svg_path(), PaperSvg(report)));
  }
  return report;
}

}  // namespace ddpkit::jobs
