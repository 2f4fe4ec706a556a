#include "tools/jobs/join/join_runner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "autograd/nn/safetensors.h"
#include "autograd/ops.h"
#include "tools/jobs/dataset.h"
#include "tools/jobs/join/collective_log.h"
#include "tools/jobs/one_process_reference.h"
#include "tools/jobs/training_loop.h"
#include "tools/trace/session.h"

namespace ddpkit::jobs {
namespace {

using Role = IterationLog::Role;

absl::Status Validate(const JoinRunConfig& config) {
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--grad-accum", config.grad_accum));
  if (config.reference_one_process) {
    DDPKIT_RETURN_IF_ERROR(CheckReferenceApplies(config));
    if (config.grad_accum > 1) {
      return absl::InvalidArgumentError(
          "--reference one-process: with --grad-accum the unsynced iterations step each rank "
          "with its own gradient, which no single process does; drop one of them");
    }
  }
  if (config.data_prefix.empty() == config.inputs.empty()) {
    return absl::InvalidArgumentError(
        "give exactly one of --inputs N0,N1,... (iterations per rank on synthetic rows) or "
        "--data-per-rank PREFIX (rank r reads PREFIX.rank<r>.safetensors)");
  }
  for (size_t r = 0; r < config.inputs.size(); ++r) {
    if (config.inputs[r] < 0 || config.inputs[r] > kMaxSteps) {
      return absl::InvalidArgumentError(StrCat("--inputs: rank ", r, " has ", config.inputs[r],
                                               " iterations; counts must be in [0, ", kMaxSteps,
                                               "]"));
    }
  }
  if (!comm::InfoOf(config.world.backend).ranks_share_process) return absl::OkStatus();
  if (!config.inputs.empty() && config.world.world_size != 0 &&
      config.world.world_size != static_cast<int>(config.inputs.size())) {
    return absl::InvalidArgumentError(StrCat("--inputs lists ", config.inputs.size(),
                                             " ranks but --world-size is ",
                                             config.world.world_size));
  }
  if (config.inputs.empty() && config.world.world_size < 1) {
    return absl::InvalidArgumentError(
        "--data-per-rank needs --world-size (the number of rank files)");
  }
  return absl::OkStatus();
}

// The world: --inputs sets its size unless --world-size was given; the flight recorders keep
// enough collectives for one iteration's record.
comm::WorldSpec WorldOf(const JoinRunConfig& config) {
  comm::WorldSpec world = config.world;
  if (world.world_size == 0) world.world_size = static_cast<int>(config.inputs.size());
  world.options.flight_recorder_size =
      std::max<size_t>(world.options.flight_recorder_size, 4 * IterationLog::kMaxCollectives);
  return world;
}

struct RankRows {
  ClassificationData data = {};
  int iterations = 0;
};

// One seeded task of sum(inputs) * b rows; rank r takes its inputs[r] * b rows after the
// earlier ranks' (at least one row, so a rank without iterations still has data to report).
RankRows SyntheticRows(const JoinRunConfig& config, const models::ModelSpec& model, int rank) {
  const int64_t b = config.batch_size;
  int64_t before = 0, total = 0;
  for (int r = 0; r < static_cast<int>(config.inputs.size()); ++r) {
    if (r < rank) before += config.inputs[r];
    total += config.inputs[r];
  }
  ClassificationData all =
      MakeSyntheticData(std::max<int64_t>(1, total * b), model.io, config.seed + 1);
  RankRows rows{.iterations = config.inputs[rank]};
  const int64_t own = std::max<int64_t>(1, rows.iterations * b);
  rows.data.x = BatchInput(model.io, own);
  rows.data.y = BatchLabels(model.io, own);
  GatherRows(all, before * b, rows.data.x.size(0), rows.data.x, rows.data.y);
  rows.data.description = absl::StrFormat(
      "synthetic (seed %d, %d rows per iteration per rank, no row shared)", config.seed, b);
  return rows;
}

absl::StatusOr<RankRows> LoadRankRows(const JoinRunConfig& config, const models::ModelSpec& model,
                                      int rank, int world) {
  if (!config.inputs.empty() && static_cast<int>(config.inputs.size()) != world) {
    return absl::InvalidArgumentError(
        StrCat("--inputs lists ", config.inputs.size(), " ranks but the world has ", world));
  }
  if (config.data_prefix.empty()) return SyntheticRows(config, model, rank);
  const std::string path = StrCat(config.data_prefix, ".rank", rank, ".safetensors");
  absl::StatusOr<ClassificationData> loaded =
      LoadClassificationData(path, model.io, EmptyData::kAllow);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        StrCat("rank ", rank, ": ", loaded.status().message()));
  }
  RankRows rows{.data = *std::move(loaded)};
  rows.iterations = static_cast<int>(rows.data.rows() / config.batch_size);
  rows.data.description = StrCat(config.data_prefix, ".rank<r>.safetensors");
  return rows;
}

// Every rank learns every rank's iteration count.
absl::StatusOr<std::vector<int>> ShareIterationCounts(comm::ProcessGroup& group, int mine) {
  Tensor counts = Tensor::Zeros({group.size()}, DType::kInt64);
  counts.data<int64_t>()[group.rank()] = mine;
  comm::ScopedCollectiveTag tag({.purpose = "job"});
  DDPKIT_RETURN_IF_ERROR(WaitFor(group.Allreduce(counts), "sharing the iteration counts"));
  std::vector<int> inputs(group.size());
  for (int r = 0; r < group.size(); ++r) inputs[r] = static_cast<int>(counts.data<int64_t>()[r]);
  return inputs;
}

// One rank of the run.
struct Rank {
  Rank(comm::ProcessGroup& g, RankRows r, std::vector<int> in)
      : group(g), rows(std::move(r)), inputs(in), log(std::move(in), g.rank()), tap(g) {}
  comm::ProcessGroup& group;
  RankRows rows;
  std::vector<int> inputs;  // iterations per rank
  std::shared_ptr<nn::Module> model;
  std::shared_ptr<reducer::DistributedDataParallel> ddp;
  RankOptimizer optimizer;
  IterationLog log;
  CollectiveTap tap;
  trace::TraceRecorder* trace = nullptr;  // null unless --trace
  int most() const { return *std::max_element(inputs.begin(), inputs.end()); }
  int fewest() const { return *std::min_element(inputs.begin(), inputs.end()); }
};

// Room for the records of `iterations` iterations of a model with `params` parameters: per
// iteration a few spans, and per parameter a hook and at most one bucket ready, launched and
// reduced.
trace::TraceCapacity TraceCapacityFor(int iterations, size_t params) {
  const size_t t = std::max(1, iterations);
  return {.compute = t * (4 * params + 8) + 1024, .collectives = t * (params + 16) + 1024};
}

absl::StatusOr<std::unique_ptr<Rank>> SetUp(const JoinRunConfig& config,
                                            const models::ModelSpec& model,
                                            comm::ProcessGroup& group, trace::TraceSession& trace) {
  DDPKIT_ASSIGN_OR_RETURN(RankRows rows, LoadRankRows(config, model, group.rank(), group.size()));
  DDPKIT_ASSIGN_OR_RETURN(std::vector<int> inputs, ShareIterationCounts(group, rows.iterations));
  auto rank = std::make_unique<Rank>(group, std::move(rows), std::move(inputs));
  DDPKIT_ASSIGN_OR_RETURN(
      rank->trace, trace.BeginRank(group, TraceCapacityFor(rank->most(), model.parameter_tensors)));
  JoinRunConfig placed = config;
  placed.device = RankDevice(config.device, group);
  DDPKIT_ASSIGN_OR_RETURN(rank->model, BuildModel(placed));
  DDPKIT_ASSIGN_OR_RETURN(rank->ddp, WrapInDdp(config, rank->model, group));
  if (rank->trace != nullptr) rank->ddp->reducer().SetTraceObserver(rank->trace);
  rank->ddp->set_divide_by_initial_world_size(config.divide_by_initial_world_size);
  DDPKIT_ASSIGN_OR_RETURN(rank->optimizer, MakeOptimizer(config, *rank->model, group));
  rank->tap.Take();  // the record starts after setup's collectives (DDP's model check and sync)
  return rank;
}

double GradNorm(const nn::Module& model) {
  double sum = 0;
  for (const Tensor& p : model.Parameters()) {
    if (!p.grad().defined()) continue;
    for (double g : p.grad().ToDoubles()) sum += g * g;
  }
  return std::sqrt(sum);
}

// This rank's own iterations. The lowest active rank of each iteration logs the gradient it
// stepped with and the collectives it issued.
void TrainLoop(const JoinRunConfig& config, Rank& rank) {
  const int64_t b = config.batch_size;
  const Device device = RankDevice(config.device, rank.group);
  Tensor x = BatchLike(rank.rows.data.x, b, device);
  Tensor y = BatchLike(rank.rows.data.y, b, device);
  const TrainingStep step{
      .optimizer = rank.optimizer.optimizer.get(),
      .ddp = rank.ddp.get(),
      .trace = rank.trace,
      .synced = [&](int t) { return t % config.grad_accum == 0; },
      .load = [&](int t, int) { GatherRows(rank.rows.data, t * b, b, x, y); },
      .forward =
          [&](int t, int) {
            rank.model->SetForwardContext({rank.group.rank(), t});
            return TrainingLoss(config.loss, rank.ddp->Forward(x), y);
          },
      .after_backward = [&](int t, int, const Tensor& loss) { rank.log.SetLoss(t, loss.item()); },
      .before_optimizer =
          [&](int t) {
            if (rank.log.IsReporter(t, Role::kActive)) {
              rank.log.SetGradient(t, GradNorm(*rank.model),
                                   rank.ddp->reducer().last_divide_factor());
            }
            return absl::OkStatus();
          }};
  const TrainingLoop loop{.steps = rank.rows.iterations, .after_step = [&](int t, double) {
                            std::vector<CollectiveRecord> issued = rank.tap.Take();
                            if (rank.log.IsReporter(t, Role::kActive)) {
                              rank.log.SetCollectives(t, Role::kActive, issued);
                            }
                            return absl::OkStatus();
                          }};
  // Its hooks return no errors; a failed collective throws, which Join needs to see.
  if (absl::Status s = RunTrainingLoop(step, loop); !s.ok()) ThrowStatus(s);
  // What a joined rank records next belongs to the first iteration it shadows.
  if (rank.trace != nullptr) rank.trace->SetIteration(rank.rows.iterations);
}

// Why a SyncBatchNorm run under plain Join failed: which ranks had joined, and the way out.
std::string SyncBatchNormUnderJoin(const Rank& rank) {
  std::string joined;
  for (int r = 0; r < static_cast<int>(rank.inputs.size()); ++r) {
    if (rank.inputs[r] == rank.fewest()) absl::StrAppend(&joined, joined.empty() ? "" : ", ", r);
  }
  return StrCat(
      "\n--sync-batchnorm under Join: rank ", joined, " ran out of inputs after ", rank.fewest(),
      " iterations and joined; a joined rank shadows DDP's collectives but never runs the model, "
      "so SyncBatchNorm's allreduce in the other ranks' forward cannot be matched (PyTorch hangs "
      "there). Use --throw-on-early-termination to stop every rank when the first runs out");
}

// The loop inside Join: DDP, then the ZeRO optimizer, then a recorder whose hook logs what the
// other two shadowed. Throw mode's stop (kAborted, every rank in one iteration) is recorded.
void RunUnderJoin(const JoinRunConfig& config, Rank& rank, JoinReport& report) {
  int shadowed = 0;
  ShadowRecorder recorder(rank.group, [&] {
    const int t = rank.rows.iterations + shadowed++;
    std::vector<CollectiveRecord> issued = rank.tap.Take();
    if (rank.log.IsReporter(t, Role::kShadowing)) {
      rank.log.SetCollectives(t, Role::kShadowing, issued);
    }
    if (rank.trace != nullptr) rank.trace->SetIteration(t + 1);
  });
  std::vector<join::Joinable*> joinables = JoinablesOf(*rank.ddp, rank.optimizer.zero);
  joinables.push_back(&recorder);
  try {
    join::Join::Run(joinables, {.throw_on_early_termination = config.throw_on_early_termination},
                    [&] { TrainLoop(config, rank); });
  } catch (const Error& e) {
    if (config.sync_batchnorm && !config.throw_on_early_termination &&
        rank.fewest() != rank.most()) {
      throw Error(StrCat(e.what(), SyncBatchNormUnderJoin(rank)), e.code());
    }
    if (!config.throw_on_early_termination || e.code() != absl::StatusCode::kAborted) throw;
    // Every rank stops in the iteration the first rank ran out at.
    const int stop = rank.fewest();
    report.set_stopped_at_iteration(stop);
    report.set_stop_message(e.what());
    std::vector<CollectiveRecord> issued = rank.tap.Take();
    for (Role role : {Role::kActive, Role::kShadowing}) {
      if (stop < rank.most() && rank.log.IsReporter(stop, role)) {
        rank.log.SetCollectives(stop, role, issued);
      }
    }
  }
}

JoinReport DescribeRun(const JoinRunConfig& config, const Rank& rank) {
  JoinReport report;
  report.set_rank(rank.group.rank());
  report.set_model(config.model);
  report.set_world_size(rank.group.size());
  report.set_backend(std::string(rank.group.backend_name()));
  for (int n : rank.inputs) report.add_inputs(n);
  report.set_batch_size(config.batch_size);
  report.set_grad_accum(config.grad_accum);
  report.set_pytorch_rules(reducer::RulesFollowed(config.ddp.pytorch_version));
  report.set_data(rank.rows.data.description);
  report.set_optimizer(config.optimizer);
  report.set_join(config.use_join);
  report.set_divide_by_initial_world_size(config.divide_by_initial_world_size);
  report.set_throw_on_early_termination(config.throw_on_early_termination);
  report.set_stopped_at_iteration(-1);
  return report;
}

// Every rank is here now: combine the per-iteration logs, compare the final models, share the
// optimizer shard sizes; then rank 0's accuracy and saved weights.
absl::Status Summarize(const JoinRunConfig& config, Rank& rank, JoinReport& report) {
  comm::ProcessGroup& group = rank.group;
  comm::ScopedCollectiveTag tag({.purpose = "job"});
  DDPKIT_RETURN_IF_ERROR(rank.log.Combine(group));
  DDPKIT_ASSIGN_OR_RETURN(const bool identical, ModelsIdentical(*rank.model, group));
  report.set_models_identical(identical);
  Tensor stepped = Tensor::Zeros({group.size()}, DType::kInt64);
  stepped.data<int64_t>()[group.rank()] = rank.optimizer.elements_stepped;
  DDPKIT_RETURN_IF_ERROR(WaitFor(group.Allreduce(stepped), "sharing the optimizer shard sizes"));
  for (int r = 0; r < group.size(); ++r) report.add_elements_stepped(stepped.data<int64_t>()[r]);
  report.set_authoritative_rank(rank.ddp->authoritative_rank());

  const int stopped = report.stopped_at_iteration();
  rank.log.AddToReport(stopped >= 0 ? std::min(rank.most(), rank.fewest() + 1) : rank.most(),
                       stopped, report);
  report.set_final_accuracy(Accuracy(*rank.model, rank.rows.data));
  if (group.rank() == 0 && !config.save_weights_path.empty()) {
    DDPKIT_RETURN_IF_ERROR(SaveStateDict(*rank.model, config.save_weights_path));
  }
  return absl::OkStatus();
}

// Rank 0: the run again as one process on the union of every rank's rows (each iteration the
// rows of the ranks still active then), against DDP's final model. Rank 0 reads every rank's
// rows, so with --data-per-rank every rank file must be on its host.
absl::Status CompareWithReference(const JoinRunConfig& config, const models::ModelSpec& model,
                                  const Rank& rank, JoinReport& report) {
  const int world = rank.group.size();
  std::vector<RankRows> rows;
  for (int r = 0; r < world; ++r) {
    DDPKIT_ASSIGN_OR_RETURN(RankRows loaded, LoadRankRows(config, model, r, world));
    rows.push_back(std::move(loaded));
  }
  const int stopped = report.stopped_at_iteration();
  const int64_t b = config.batch_size;
  auto active = [&](int t) {
    std::vector<int> ranks;
    for (int r = 0; r < world; ++r) {
      if (t < rank.inputs[r]) ranks.push_back(r);
    }
    return ranks;
  };
  const ReferencePlan plan{.iterations = stopped >= 0 ? stopped : rank.most(),
                           .rows =
                               [&](int t, int) {
                                 std::vector<RowSlice> slices;
                                 for (int r : active(t))
                                   slices.push_back({&rows[r].data, t * b, b});
                                 return slices;
                               },
                           .loss_scale =
                               [&](int t) {
                                 return DdpLossScale(config.loss,
                                                     static_cast<int>(active(t).size()), world,
                                                     config.divide_by_initial_world_size);
                               }};
  DDPKIT_ASSIGN_OR_RETURN(const ReferenceComparison c,
                          CompareWithOneProcess(config, *rank.model, plan));
  SetReferenceFields(c, report);
  return absl::OkStatus();
}

absl::StatusOr<JoinReport> RunOnRank(const JoinRunConfig& config, const models::ModelSpec& model,
                                     comm::ProcessGroup& group, trace::TraceSession& trace) {
  DDPKIT_ASSIGN_OR_RETURN(std::unique_ptr<Rank> rank, SetUp(config, model, group, trace));
  JoinReport report = DescribeRun(config, *rank);
  if (config.use_join) {
    RunUnderJoin(config, *rank, report);
    trace.EndRank(group, rank->ddp->LoggingData());
  } else {
    TrainLoop(config, *rank);
    trace.EndRank(group, rank->ddp->LoggingData());
    // A rank that ran out leaves, as a process whose loop ended would: anything more it
    // issued would only be paired with another rank's gradient allreduce. The ranks still
    // training fail in their next collective with the comm layer's diagnosis.
    if (rank->fewest() != rank->most()) {
      report.set_left_without_join(true);
      return report;
    }
  }
  DDPKIT_RETURN_IF_ERROR(Summarize(config, *rank, report));
  if (config.reference_one_process && group.rank() == 0) {
    DDPKIT_RETURN_IF_ERROR(CompareWithReference(config, model, *rank, report));
  }
  return report;
}

}  // namespace

absl::StatusOr<JoinReport> RunJoin(const JoinRunConfig& config) {
  DDPKIT_ASSIGN_OR_RETURN(const models::ModelSpec model, ValidateDdpTraining(config));
  DDPKIT_RETURN_IF_ERROR(Validate(config));
  const int64_t most =
      config.inputs.empty() ? 0 : *std::max_element(config.inputs.begin(), config.inputs.end());
  const double data_bytes =
      4.0 * static_cast<double>(most) * static_cast<double>(config.batch_size) *
      static_cast<double>(NumElements(model.io.synthetic_row) + 1) * 2;  // synthetic rows
  DDPKIT_RETURN_IF_ERROR(
      CheckFitsInMemory(EstimateRankBytes(model, config.batch_size, data_bytes),
                        !comm::InfoOf(config.world.backend).ranks_share_process ? 1
                        : config.world.world_size > 0 ? config.world.world_size
                                                      : static_cast<int>(config.inputs.size()),
                        "--model, --batch-size and --inputs"));
  trace::TraceSession trace(config.trace_path, "join", WorldOf(config));
  DDPKIT_ASSIGN_OR_RETURN(JoinReport report, RunOnEveryRank<JoinReport>(
                                                 WorldOf(config), [&](comm::ProcessGroup& group) {
                                                   return RunOnRank(config, model, group, trace);
                                                 }));
  DDPKIT_RETURN_IF_ERROR(trace.Write().status());
  return report;
}

}  // namespace ddpkit::jobs
