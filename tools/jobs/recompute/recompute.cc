#include "tools/jobs/recompute/recompute.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "autograd/memory_stats.h"
#include "autograd/nn/optim.h"
#include "autograd/ops.h"
#include "reducer/distributed_data_parallel.h"
#include "reducer/extras/fused_allreduce.h"
#include "tools/jobs/dataset.h"
#include "tools/jobs/recompute/recompute_trace.h"
#include "tools/jobs/training.h"
#include "tools/jobs/training_loop.h"
#include "tools/trace/session.h"

namespace ddpkit::jobs {
namespace {

using Clock = std::chrono::steady_clock;
using reducer::DdpOptions;
using reducer::DistributedDataParallel;

constexpr int kMaxBlocks = 256;
constexpr int64_t kMaxWidth = 16384;
constexpr const char* kFlags = "--model (or --blocks, --width), --batch-size and --world-size";

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

RecomputeModelSpec ModelOf(const RecomputeConfig& config) {
  return {.model = config.model, .shape = config.shape};
}

absl::StatusOr<RecomputeModelInfo> Validate(const RecomputeConfig& config) {
  if (config.shape.blocks < 1 || config.shape.blocks > kMaxBlocks) {
    return absl::InvalidArgumentError(
        StrCat("--blocks must be in [1, ", kMaxBlocks, "], got ", config.shape.blocks));
  }
  if (config.shape.width < 1 || config.shape.width > kMaxWidth) {
    return absl::InvalidArgumentError(
        StrCat("--width must be in [1, ", kMaxWidth, "], got ", config.shape.width));
  }
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--batch-size", config.batch_size));
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--steps", config.steps, 1));
  if (config.steps > kMaxSteps) {
    return absl::InvalidArgumentError(
        StrCat("--steps must be at most ", kMaxSteps, ", got ", config.steps));
  }
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--lr", config.lr));
  DDPKIT_RETURN_IF_ERROR(reducer::ValidateDdpOptions(config.ddp));
  DDPKIT_ASSIGN_OR_RETURN(RecomputeModelInfo info, DescribeRecomputeModel(ModelOf(config)));
  const int ranks_here =
      comm::InfoOf(config.world.backend).ranks_share_process ? config.world.world_size : 1;
  // The reference trains on the global batch, so size the estimate for that.
  const int64_t global_batch = static_cast<int64_t>(config.batch_size) * config.world.world_size;
  DDPKIT_RETURN_IF_ERROR(
      CheckFitsInMemory(EstimateRankBytes(info.spec, global_batch, 0), ranks_here + 1, kFlags));
  return info;
}

// max |a - b| / max |b| over all the tensors.
double RelError(const TensorList& a, const TensorList& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<double> av = a[i].ToDoubles(), bv = b[i].ToDoubles();
    for (size_t j = 0; j < av.size(); ++j) {
      diff = std::max(diff, std::abs(av[j] - bv[j]));
      scale = std::max(scale, std::abs(bv[j]));
    }
  }
  return scale == 0 ? diff : diff / scale;
}

int64_t ParameterBytes(const nn::Module& model) {
  int64_t bytes = 0;
  for (const Tensor& p : model.Parameters()) bytes += static_cast<int64_t>(p.nbytes());
  return bytes;
}

TensorList Grads(const nn::Module& model) {
  TensorList grads;
  for (const Tensor& p : model.Parameters()) {
    grads.push_back(p.grad().defined() ? p.grad().Clone() : Tensor::Zeros(p.shape(), p.dtype()));
  }
  return grads;
}

TensorList Clones(const TensorList& tensors) {
  TensorList out;
  for (const Tensor& t : tensors) out.push_back(t.Clone());
  return out;
}

// What one process training on the whole global batch gets: the oracle for both DDP runs.
struct Reference {
  TensorList first_grads;
  TensorList final_parameters;
};

// The loss every run trains on: the mean cross-entropy (over every position of a GPT's rows).
Tensor LossOf(nn::Module& model, const Tensor& x, const Tensor& y) {
  return TrainingLoss("ce", model.Forward(x), y);
}

Reference TrainOneProcess(const RecomputeConfig& config, const ClassificationData& data) {
  const CheckpointableModel made = MakeRecomputeModel(ModelOf(config), config.seed);
  nn::Module& model = *made.module;
  Sgd sgd(model.Parameters(), {.lr = config.lr});
  const int64_t global_batch = static_cast<int64_t>(config.batch_size) * config.world.world_size;
  Tensor x = BatchLike(data.x, global_batch);
  Tensor y = BatchLike(data.y, global_batch);
  Reference reference;
  for (int step = 0; step < config.steps; ++step) {
    sgd.ZeroGrad();
    GatherRows(data, step * global_batch, global_batch, x, y);
    LossOf(model, x, y).Backward();
    if (step == 0) reference.first_grads = Grads(model);
    sgd.Step();
  }
  reference.final_parameters = Clones(model.Parameters());
  return reference;
}

// One forward and backward of a local batch, without and with checkpointing. Runs before any
// rank starts: the storage counters are process-wide.
void MeasureActivationMemory(const RecomputeConfig& config, const ClassificationData& data,
                             RecomputeReport& report) {
  const CheckpointableModel made = MakeRecomputeModel(ModelOf(config), config.seed);
  nn::Module& model = *made.module;
  report.set_parameter_bytes(ParameterBytes(model));
  Tensor x = BatchLike(data.x, config.batch_size);
  Tensor y = BatchLike(data.y, config.batch_size);
  GatherRows(data, 0, config.batch_size, x, y);
  LossOf(model, x, y).Backward();  // the gradients exist before the baseline
  for (const bool checkpoint : {false, true}) {
    made.set_checkpoint(checkpoint);
    ResetPeakTensorMemory();
    const int64_t baseline = TensorMemory().live_bytes;
    Tensor loss = LossOf(model, x, y);
    ActivationMemory* m = report.add_memory();
    m->set_checkpoint(checkpoint);
    m->set_after_forward_bytes(TensorMemory().live_bytes - baseline);
    loss.Backward();
    m->set_peak_bytes(TensorMemory().peak_bytes - baseline);
  }
}

struct RankContext {
  const RecomputeConfig& config;
  const ClassificationData& data;
  const Reference& reference;
  comm::ProcessGroup& group;
};

DdpOptions OptionsOf(const RecomputeConfig& config) { return config.ddp; }

// (a) The error, as a user meets it: the first backward throws on every rank.
absl::StatusOr<RecomputeRun> RunPlain(const RankContext& c) {
  RecomputeRun run;
  run.set_name("plain");
  run.set_ddp_options("find_unused_parameters=true");
  DdpOptions options = OptionsOf(c.config);
  options.find_unused_parameters = true;
  auto model = MakeRecomputeModel(ModelOf(c.config), c.config.seed).module;
  DDPKIT_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(model, c.group, options));
  Tensor x = BatchLike(c.data.x, c.config.batch_size);
  Tensor y = BatchLike(c.data.y, c.config.batch_size);
  GatherRows(c.data, c.group.rank() * c.config.batch_size, c.config.batch_size, x, y);
  try {
    LossOf(*ddp, x, y).Backward();
    run.set_ok(true);
  } catch (const Error& e) {
    run.set_error(e.what());
  }
  ddp.reset();
  // Every rank failed at the same hook, after launching the same buckets: line them up again
  // before the next run reuses the group.
  DDPKIT_RETURN_IF_ERROR(c.group.Barrier()->Wait());
  return run;
}

void SetStepTimes(std::vector<double> step_ms, RecomputeRun& run) {
  // Steps 0 and 1 build and rebuild the buckets (static_graph learns the hook counts).
  if (step_ms.size() > 2) step_ms.erase(step_ms.begin(), step_ms.begin() + 2);
  std::sort(step_ms.begin(), step_ms.end());
  run.set_step_ms_median(step_ms[step_ms.size() / 2]);
  run.set_step_ms_min(step_ms.front());
  run.set_step_ms_max(step_ms.back());
}

bool BitwiseEqual(const TensorList& a, const TensorList& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].nbytes() != b[i].nbytes() ||
        std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].nbytes()) != 0) {
      return false;
    }
  }
  return true;
}

// (b) and (c): `fused` runs every backward under no_sync and then one fused allreduce.
// static_graph leaves its final parameters in `static_final`; fused compares against them.
absl::StatusOr<RecomputeRun> RunTraining(const RankContext& c, bool fused,
                                         trace::TraceSession& trace, TensorList& static_final) {
  const RecomputeConfig& config = c.config;
  RecomputeRun run;
  run.set_name(fused ? "no_sync_fused" : "static_graph");
  run.set_ddp_options(fused ? "no_sync + FusedGradientAllreduce" : "static_graph=true");
  DdpOptions options = OptionsOf(config);
  options.static_graph = !fused;
  auto model = MakeRecomputeModel(ModelOf(config), config.seed).module;
  DDPKIT_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(model, c.group, options));
  DDPKIT_ASSIGN_OR_RETURN(trace::TraceRecorder * recorder, trace.BeginRank(c.group, {}));
  if (recorder != nullptr) ddp->reducer().SetTraceObserver(recorder);
  Sgd sgd(model->Parameters(), {.lr = config.lr});
  std::optional<reducer::FusedGradientAllreduce> fused_allreduce;  // its buffers, once
  if (fused) fused_allreduce.emplace(model->NamedParameters());

  const int64_t b = config.batch_size, global_batch = b * c.group.size();
  Tensor x = BatchLike(c.data.x, b);
  Tensor y = BatchLike(c.data.y, b);
  Tensor losses = Tensor::Zeros({config.steps}, DType::kFloat64);
  std::vector<double> step_ms, comm_ms;
  const TrainingStep one_step{
      .optimizer = &sgd,
      .ddp = ddp.get(),
      .trace = recorder,
      .sync_last = !fused,
      .load = [&](int step,
                  int) { GatherRows(c.data, step * global_batch + c.group.rank() * b, b, x, y); },
      .forward = [&](int, int) { return LossOf(*ddp, x, y); },
      .after_backward = [&](int step, int,
                            const Tensor& loss) { losses.data<double>()[step] = loss.item(); },
      .before_optimizer = [&](int step) -> absl::Status {
        if (fused) {
          const Clock::time_point comm_start = Clock::now();
          DDPKIT_RETURN_IF_ERROR(fused_allreduce->Run(c.group));
          comm_ms.push_back(Ms(Clock::now() - comm_start));
        }
        if (step == 0) run.set_grad_rel_error(RelError(Grads(*model), c.reference.first_grads));
        return absl::OkStatus();
      }};
  DDPKIT_RETURN_IF_ERROR(
      RunTrainingLoop(one_step, {.steps = config.steps, .after_step = [&](int, double ms) {
                                   step_ms.push_back(ms);
                                   return absl::OkStatus();
                                 }}));
  trace.EndRank(c.group, ddp->LoggingData());
  run.set_ok(true);
  run.set_param_rel_error(RelError(model->Parameters(), c.reference.final_parameters));
  if (fused) {
    run.set_bitwise_equal_to_static_graph(BitwiseEqual(model->Parameters(), static_final));
  } else {
    static_final = Clones(model->Parameters());
  }
  SetStepTimes(step_ms, run);
  if (fused) {
    run.set_comm_ms(Median(comm_ms));
    run.set_exposed_comm_ms(run.comm_ms());  // it starts after backward: nothing overlaps it
    run.set_bytes_reduced(fused_allreduce->bytes());
  } else {
    const reducer::DdpLoggingData& logging = ddp->LoggingData();
    run.set_comm_ms(logging.avg_backward_comm_time() / 1e6);
    run.set_exposed_comm_ms(logging.avg_backward_exposed_comm_time() / 1e6);
    run.set_bytes_reduced(ParameterBytes(*model));  // the same gradients, in buckets
  }
  DDPKIT_RETURN_IF_ERROR(c.group.Allreduce(losses)->Wait());
  for (int step = 0; step < config.steps; ++step) {
    run.add_losses(losses.data<double>()[step] / c.group.size());
  }
  return run;
}

RecomputeReport DescribeConfig(const RecomputeConfig& config, const RecomputeModelInfo& info) {
  RecomputeReport report;
  report.set_model(info.spec.text);
  report.set_checkpointed(info.unit);
  report.set_blocks(info.checkpointed);
  if (config.model.empty()) {
    report.set_width(config.shape.width);
    report.set_input_dim(config.shape.input_dim);
  }
  report.set_classes(info.spec.io.classes);
  report.set_batch_size(config.batch_size);
  report.set_steps(config.steps);
  report.set_lr(config.lr);
  report.set_seed(config.seed);
  report.set_bucket_cap_mb(static_cast<double>(reducer::LimitsOf(config.ddp).bucket_cap_bytes) /
                           (1024.0 * 1024.0));
  report.set_pytorch_rules(reducer::RulesFollowed(config.ddp.pytorch_version));
  return report;
}

}  // namespace

absl::StatusOr<RecomputeReport> RunRecompute(const RecomputeConfig& config) {
  DDPKIT_ASSIGN_OR_RETURN(const RecomputeModelInfo info, Validate(config));
  const comm::WorldSpec world = config.world;
  const int64_t global_rows = static_cast<int64_t>(config.batch_size) * config.world.world_size;
  // Under gloo the world size is the launcher's; the data covers any world up to ours.
  const ClassificationData data =
      MakeSyntheticData(global_rows * config.steps, info.spec.io, config.seed);
  RecomputeReport setup = DescribeConfig(config, info);
  MeasureActivationMemory(config, data, setup);
  std::optional<Reference> reference;  // needs the world size: built by the first rank
  std::mutex reference_mu;
  std::vector<std::unique_ptr<trace::TraceSession>> traces;
  for (const char* name : {"static_graph", "no_sync_fused"}) {
    traces.push_back(std::make_unique<trace::TraceSession>(RunTracePath(config.trace_path, name),
                                                           "recompute", world));
  }
  DDPKIT_ASSIGN_OR_RETURN(
      RecomputeReport report,
      RunOnEveryRank<RecomputeReport>(
          world, [&](comm::ProcessGroup& group) -> absl::StatusOr<RecomputeReport> {
            RecomputeConfig rank_config = config;
            rank_config.world.world_size = group.size();
            {
              std::lock_guard<std::mutex> lock(reference_mu);
              if (!reference) reference = TrainOneProcess(rank_config, data);
            }
            const RankContext c{rank_config, data, *reference, group};
            RecomputeReport r = setup;
            r.set_world_size(group.size());
            r.set_backend(std::string(comm::BackendName(config.world.backend)));
            r.set_rank(group.rank());
            DDPKIT_ASSIGN_OR_RETURN(*r.add_runs(), RunPlain(c));
            TensorList static_final;
            DDPKIT_ASSIGN_OR_RETURN(*r.add_runs(), RunTraining(c, false, *traces[0], static_final));
            DDPKIT_ASSIGN_OR_RETURN(*r.add_runs(), RunTraining(c, true, *traces[1], static_final));
            return r;
          }));
  for (auto& trace : traces) {
    DDPKIT_ASSIGN_OR_RETURN(std::vector<std::string> paths, trace->Write());
    for (const std::string& path : paths) report.add_trace_files(path);
  }
  if (!config.trace_path.empty()) {
    DDPKIT_RETURN_IF_ERROR(
        WriteSideBySideTimelines(config.trace_path, config.world.backend, report));
  }
  return report;
}

}  // namespace ddpkit::jobs
