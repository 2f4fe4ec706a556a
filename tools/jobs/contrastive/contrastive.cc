#include "tools/jobs/contrastive/contrastive.h"

#include <cmath>

#include "autograd/cuda/runtime.h"
#include "autograd/nn/optim.h"
#include "autograd/ops.h"
#include "comm/threads/threads_world.h"
#include "reducer/distributed_data_parallel.h"
#include "tools/jobs/training.h"
#include "tools/jobs/training_loop.h"
#include "tools/trace/session.h"

namespace ddpkit::jobs {
namespace {

using Grads = std::vector<std::pair<std::string, std::vector<double>>>;

void CheckOk(const absl::Status& s, std::string_view what) {
  if (!s.ok()) throw Error(StrCat("[contrastive] ", what, " failed: ", s.message()), s.code());
}

// The data every run shares: training pairs (enough for every step, and for the gradient
// check's rows) and held-out pairs for the accuracy.
struct Setup {
  const ContrastiveConfig& config;
  int world;                         // ranks in the data-parallel runs
  std::vector<int64_t> check_rows;   // per rank, for the gradient check
  std::optional<RealTowers> towers;  // nullopt: the MLP towers
  PairedData train = {}, held_out = {};
  size_t parameter_tensors = 0;
};

// Built on the host from the seed (a GPU run starts from the same weights), then moved to the
// rank's device.
std::shared_ptr<TwoTowerModel> MakeModel(const Setup& s, Device device) {
  const ContrastiveConfig& c = s.config;
  auto model =
      s.towers ? std::make_shared<TwoTowerModel>(*s.towers, c.feature_dim, c.seed)
               : std::make_shared<TwoTowerModel>(c.input_dim, c.hidden_dim, c.feature_dim, c.seed);
  model->To(device);
  return model;
}

Setup MakeSetup(const ContrastiveConfig& config, int world, std::optional<RealTowers> towers) {
  Setup s{.config = config, .world = world, .check_rows = config.check_rows, .towers = towers};
  if (s.check_rows.empty()) s.check_rows.assign(world, config.batch_size);
  int64_t check_total = 0;
  for (int64_t n : s.check_rows) check_total += n;
  const int64_t global = static_cast<int64_t>(config.batch_size) * world;
  const int64_t train_rows = std::max<int64_t>(check_total, global * std::max(1, config.steps));
  const int64_t rows = train_rows + config.held_out;
  PairedData all = towers
                       ? MakeClassPairs(rows, *towers, config.pair_classes, config.seed + 7)
                       : MakePairedData(rows, config.input_dim, config.latent_dim, config.seed + 7);
  s.train = all.Rows(0, train_rows);
  s.held_out = all.Rows(train_rows, train_rows + config.held_out);
  s.parameter_tensors = MakeModel(s, Device::Cpu())->Parameters().size();
  return s;
}

// `t` on `device` (itself when it is there already).
Tensor OnDevice(const Tensor& t, Device device) { return t.device() == device ? t : t.To(device); }

// static_graph: the graph is the same every step, and with gather `none` in the global layout
// the encoders get no gradient at all (everything they produce reaches the loss only through
// constants); static graph records that once instead of failing the next forward.
std::shared_ptr<reducer::DistributedDataParallel> WrapInDdp(std::shared_ptr<TwoTowerModel> model,
                                                            comm::ProcessGroup& group,
                                                            reducer::PyTorchVersion version) {
  absl::StatusOr<std::shared_ptr<reducer::DistributedDataParallel>> ddp =
      reducer::DistributedDataParallel::Create(std::move(model), group,
                                               {.pytorch_version = version, .static_graph = true});
  CheckOk(ddp.status(), "wrapping the model in DDP");
  return *ddp;
}

// One synced backward on `group`: this rank's `rows` rows starting at row `first`; returns the
// averaged gradients (identical on every rank), read on the host.
Grads GradientsOn(const Setup& s, comm::ProcessGroup& group, int64_t first, int64_t rows,
                  ContrastiveLayout layout, GatherBackward gather) {
  const Device device = RankDevice(s.config.device, group);
  auto model = MakeModel(s, device);
  // One process normalises each rank's images as that rank's BatchNorm does.
  if (group.size() == 1) model->SetImageGroups(s.check_rows);
  auto ddp = WrapInDdp(model, group, s.config.pytorch_version);
  Tensor features = ddp->Forward(OnDevice(s.train.Views(first, rows), device));
  ClipLoss(Slice(features, 0, rows), Slice(features, rows, 2 * rows), model->logit_scale(), group,
           layout, gather)
      .loss.Backward();
  Grads grads;
  for (const auto& [name, p] : model->NamedParameters()) {
    grads.emplace_back(
        name, p.grad().defined() ? p.grad().ToDoubles() : std::vector<double>(p.numel(), 0.0));
  }
  return grads;
}

// g against the reference: relative error, the best-fit scale s (g ≈ s·ref) and what a rescale
// cannot explain, over the encoders; the logit scale's gradient on its own.
GradientCheckRow Compare(const Grads& g, const Grads& ref) {
  double dot = 0, ref_sq = 0, diff_sq = 0, g_sq = 0, scale_g = 0, scale_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    for (size_t k = 0; k < ref[i].second.size(); ++k) {
      const double a = g[i].second[k], r = ref[i].second[k];
      if (ref[i].first == "logit_scale") {
        scale_g = a, scale_ref = r;
        continue;
      }
      dot += a * r, ref_sq += r * r, diff_sq += (a - r) * (a - r), g_sq += a * a;
    }
  }
  const double s = ref_sq > 0 ? dot / ref_sq : 0;
  double residual_sq = 0;  // ||g - s·ref||²
  for (size_t i = 0; i < ref.size(); ++i) {
    if (ref[i].first == "logit_scale") continue;
    for (size_t k = 0; k < ref[i].second.size(); ++k) {
      const double e = g[i].second[k] - s * ref[i].second[k];
      residual_sq += e * e;
    }
  }
  GradientCheckRow row;
  row.set_encoder_rel_error(std::sqrt(diff_sq / ref_sq));
  row.set_encoder_scale(s);
  row.set_encoder_residual(g_sq == 0 ? 0.0
                                     : std::sqrt(residual_sq) / (std::abs(s) * std::sqrt(ref_sq)));
  row.set_logit_scale_rel_error(std::abs(scale_g - scale_ref) / std::abs(scale_ref));
  return row;
}

std::unique_ptr<Optimizer> MakeOptimizer(const ContrastiveConfig& c, const nn::Module& model) {
  if (c.optimizer == "adam") {
    return std::make_unique<Adam>(model.Parameters(), AdamOptions{.lr = c.lr});
  }
  return std::make_unique<Sgd>(model.Parameters(), SgdOptions{.lr = c.lr});
}

// Where a traced training run goes in the rank's trace: its steps are iterations
// first_iteration, first_iteration + 1, ...; DDP's state for naming them lands in `ddp`.
struct RunTrace {
  trace::TraceRecorder* recorder = nullptr;
  int first_iteration = 0;
  reducer::DdpLoggingData* ddp = nullptr;
};

// A training run on `group` (every rank `b` rows per step; global batch world·b). On a world of
// one the single process takes the whole global batch: the reference curve.
TrainingCurve TrainOn(const Setup& s, comm::ProcessGroup& group, ContrastiveLayout layout,
                      GatherBackward gather, RunTrace trace = {}) {
  const ContrastiveConfig& c = s.config;
  const int64_t b = c.batch_size * (group.size() == 1 ? s.world : 1);
  const int64_t global = static_cast<int64_t>(c.batch_size) * s.world;
  const Device device = RankDevice(c.device, group);
  auto model = MakeModel(s, device);
  const bool reference = group.size() == 1;
  if (reference) model->SetImageGroups(std::vector<int64_t>(s.world, c.batch_size));
  auto ddp = WrapInDdp(model, group, c.pytorch_version);
  std::unique_ptr<Optimizer> optimizer = MakeOptimizer(c, *model);
  TrainingCurve curve;
  curve.set_layout(std::string(reference ? "" : ContrastiveLayoutName(layout)));
  curve.set_gather(std::string(reference ? "single-process" : comm::GatherBackwardName(gather)));
  if (trace.recorder != nullptr) {
    ddp->reducer().SetTraceObserver(trace.recorder);
    trace.recorder->Marker(StrCat(curve.layout(), " + ", curve.gather()));
  }
  Tensor losses = Tensor::Zeros({c.steps}, DType::kFloat64);  // on the host, whatever the device
  const TrainingStep one_step{
      .optimizer = optimizer.get(),
      .ddp = ddp.get(),
      .trace = trace.recorder,
      .forward =
          [&](int step, int) {
            Tensor features =
                ddp->Forward(OnDevice(s.train.Views(step * global + group.rank() * b, b), device));
            return ClipLoss(Slice(features, 0, b), Slice(features, b, 2 * b), model->logit_scale(),
                            group, layout, gather)
                .loss;
          },
      .after_backward = [&](int step, int,
                            const Tensor& loss) { losses.data<double>()[step] = loss.item(); }};
  const TrainingLoop loop{.steps = c.steps,
                          .first_iteration = trace.first_iteration,
                          .after_step = [&](int step, double) {
                            if ((step + 1) % c.eval_every == 0 || step + 1 == c.steps) {
                              curve.add_eval_steps(step + 1);
                              curve.add_accuracy(Top1Accuracy(*model, s.held_out));
                              curve.add_logit_scale(std::exp(model->logit_scale().item()));
                            }
                            return absl::OkStatus();
                          }};
  CheckOk(RunTrainingLoop(one_step, loop), "training");
  if (trace.recorder != nullptr) trace.recorder->SetIteration(-1);
  if (trace.ddp != nullptr) *trace.ddp = ddp->LoggingData();
  // The global loss: local layout ranks hold shares whose mean is it; global ranks hold it.
  comm::ScopedCollectiveTag tag({.purpose = "job"});
  CheckOk(group.Allreduce(losses)->Wait(), "averaging the losses");
  for (int step = 0; step < c.steps; ++step) {
    curve.add_losses(losses.data<double>()[step] / group.size());
  }
  return curve;
}

absl::Status Validate(const ContrastiveConfig& c, int world) {
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--batch-size", c.batch_size, 1));
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--steps", c.steps, 0));
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--lr", c.lr));
  DDPKIT_RETURN_IF_ERROR(RequireOneOf("--optimizer", c.optimizer, {"sgd", "adam"}));
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("pair_classes", c.pair_classes, 1));
  if (!c.check_rows.empty() && static_cast<int>(c.check_rows.size()) != world) {
    return absl::InvalidArgumentError("check_rows needs one count per rank");
  }
  return absl::OkStatus();
}

// The report's setup fields and the logits each layout materialises per rank.
ContrastiveReport DescribeRun(const Setup& s) {
  const ContrastiveConfig& c = s.config;
  const int64_t global = static_cast<int64_t>(c.batch_size) * s.world;
  ContrastiveReport report;
  report.set_world_size(s.world);
  report.set_backend(std::string(comm::BackendName(c.world.backend)));
  report.set_batch_size(c.batch_size);
  report.set_global_batch(global);
  report.set_steps(c.steps);
  report.set_pytorch_rules(reducer::RulesFollowed(c.pytorch_version));
  report.set_optimizer(c.optimizer);
  report.set_lr(c.lr);
  report.set_seed(c.seed);
  report.set_image_tower(s.towers ? c.image_tower : "mlp");
  report.set_text_tower(s.towers ? c.text_tower : "mlp");
  for (int64_t n : s.check_rows) report.add_rows_per_rank(n);
  for (ContrastiveLayout layout : c.layouts) {
    LogitMemory& m = *report.add_logit_memory();
    m.set_layout(std::string(ContrastiveLayoutName(layout)));
    m.set_elements_per_rank(layout == ContrastiveLayout::kLocalGlobal ? 2 * c.batch_size * global
                                                                      : global * global);
    m.set_bytes_per_rank(m.elements_per_rank() * static_cast<int64_t>(sizeof(double)));
  }
  return report;
}

// One process on the concatenated batch: the reference gradient and the reference curve.
struct Reference {
  Grads grads;
  TrainingCurve curve;
};

absl::StatusOr<Reference> RunReference(const Setup& s) {
  int64_t rows = 0;
  for (int64_t n : s.check_rows) rows += n;
  Reference reference;
  absl::Status status = comm::RunThreadsWorld(1, [&](comm::ProcessGroup& one) {
    // On one rank every layout and exact gather is the plain loss on the whole batch.
    reference.grads =
        GradientsOn(s, one, 0, rows, ContrastiveLayout::kLocalGlobal, GatherBackward::kSum);
    if (s.config.train) {
      reference.curve = TrainOn(s, one, ContrastiveLayout::kLocalGlobal, GatherBackward::kSum);
    }
    return absl::OkStatus();
  });
  if (!status.ok()) {
    return absl::Status(status.code(),
                        StrCat("the single-process reference failed: ", status.message()));
  }
  return reference;
}

// One rank's share of the data-parallel runs: a gradient-check row and a training curve per
// (layout, gather), after the reference curve.
// Room for every traced step: per step four spans, and per parameter tensor (9 for the MLP
// towers) a hook and at most one bucket ready, launched and reduced.
trace::TraceCapacity TraceCapacityFor(const Setup& s) {
  const ContrastiveConfig& c = s.config;
  const size_t runs = c.layouts.size() * c.gathers.size(), steps = std::max(1, c.steps);
  const size_t per_step = std::max<size_t>(48, 4 + 5 * s.parameter_tensors);
  return {.compute = runs * steps * per_step + 1024,
          .collectives = runs * steps * std::max<size_t>(32, 4 * s.parameter_tensors) + 4096};
}

ContrastiveReport RunRank(const Setup& s, const Reference& reference, comm::ProcessGroup& group,
                          trace::TraceSession& trace) {
  const ContrastiveConfig& c = s.config;
  int64_t first = 0;
  for (int r = 0; r < group.rank(); ++r) first += s.check_rows[r];
  ContrastiveReport mine;
  mine.set_rank(group.rank());
  for (ContrastiveLayout layout : c.layouts) {
    for (GatherBackward gather : c.gathers) {
      Grads g = GradientsOn(s, group, first, s.check_rows[group.rank()], layout, gather);
      GradientCheckRow& row = *mine.add_gradient_check();
      row = Compare(g, reference.grads);
      row.set_layout(std::string(ContrastiveLayoutName(layout)));
      row.set_gather(std::string(comm::GatherBackwardName(gather)));
    }
  }
  if (!c.train) return mine;
  *mine.add_training() = reference.curve;
  absl::StatusOr<trace::TraceRecorder*> recorder = trace.BeginRank(group, TraceCapacityFor(s));
  CheckOk(recorder.status(), "starting the trace");
  RunTrace run_trace{.recorder = *recorder};
  reducer::DdpLoggingData ddp;
  for (ContrastiveLayout layout : c.layouts) {
    for (GatherBackward gather : c.gathers) {
      run_trace.ddp = &ddp;
      *mine.add_training() = TrainOn(s, group, layout, gather, run_trace);
      run_trace.first_iteration += c.steps;
    }
  }
  trace.EndRank(group, ddp);
  return mine;
}

}  // namespace

absl::StatusOr<ContrastiveReport> RunContrastive(const ContrastiveConfig& config) {
  DDPKIT_RETURN_IF_ERROR(comm::ValidateWorldSpec(config.world));
  DDPKIT_ASSIGN_OR_RETURN(const int world, comm::WorldSize(config.world));
  DDPKIT_RETURN_IF_ERROR(Validate(config, world));
  // Before any work (the reference runs on this device too): no GPU, or a GPU that is not there.
  if (config.device.is_cuda()) DDPKIT_RETURN_IF_ERROR(cuda::CheckUsable(config.device));
  DDPKIT_ASSIGN_OR_RETURN(const std::optional<RealTowers> towers,
                          ParseTowers(config.image_tower, config.text_tower));
  const Setup setup = MakeSetup(config, world, towers);
  ContrastiveReport report = DescribeRun(setup);
  DDPKIT_ASSIGN_OR_RETURN(const Reference reference, RunReference(setup));
  comm::WorldSpec spec = config.world;
  spec.world_size = world;
  trace::TraceSession trace(config.trace_path, "contrastive", spec);
  DDPKIT_ASSIGN_OR_RETURN(ContrastiveReport mine,
                          RunOnEveryRank<ContrastiveReport>(spec, [&](comm::ProcessGroup& group) {
                            return RunRank(setup, reference, group, trace);
                          }));
  DDPKIT_RETURN_IF_ERROR(trace.Write().status());
  report.MergeFrom(mine);
  return report;
}

}  // namespace ddpkit::jobs
