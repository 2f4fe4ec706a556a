#include "tools/jobs/varlen/varlen.h"

#include <algorithm>
#include <cmath>

#include "autograd/cuda/runtime.h"
#include "autograd/grad_mode.h"
#include "autograd/nn/safetensors.h"
#include "autograd/ops.h"
#include "comm/collective_tag.h"
#include "join/join.h"
#include "reducer/extras/named_comm_hook.h"
#include "tools/jobs/training_loop.h"
#include "tools/jobs/varlen/batching.h"
#include "tools/jobs/varlen/layout.h"
#include "tools/jobs/varlen/sequence_model.h"

namespace ddpkit::jobs {
namespace {

constexpr int64_t kMaxSamples = 10'000'000, kMaxLength = 1'000'000;

absl::Status ValidateSynthetic(const SyntheticSequenceOptions& s) {
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--samples", static_cast<double>(s.samples)));
  if (s.samples > kMaxSamples) {
    return absl::InvalidArgumentError(
        StrCat("--samples must be at most ", kMaxSamples, ", got ", s.samples));
  }
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--min-length", static_cast<double>(s.min_length)));
  if (s.max_length < s.min_length || s.max_length > kMaxLength) {
    return absl::InvalidArgumentError(StrCat("--max-length must be in [--min-length ", s.min_length,
                                             ", ", kMaxLength, "], got ", s.max_length));
  }
  // The tokens (int64), at the log-normal's mean length (sequence_data.cc), twice: the data and
  // the padded batches built from it.
  const double range = std::log(static_cast<double>(s.max_length) / s.min_length);
  const double mean_length =
      std::min<double>(s.max_length, s.min_length * std::exp(range / 4 + range * range / 32));
  return CheckFitsInMemory(2 * 8 * mean_length * static_cast<double>(s.samples), 1,
                           "--samples, --min-length and --max-length");
}

// Each rank's MLP as DDP training sizes it, plus the embedding table four times over (weights,
// gradient, bucket, momentum).
absl::Status CheckModelFits(const VarlenConfig& config, const SequenceModelSpec& spec) {
  std::vector<int64_t> widths = {spec.dim};
  widths.insert(widths.end(), spec.hidden.begin(), spec.hidden.end());
  widths.push_back(spec.classes);
  const double table = 16.0 * static_cast<double>(spec.vocab) * static_cast<double>(spec.dim);
  return CheckFitsInMemory(
      EstimateRankBytes(widths, config.batch_size, table),
      comm::InfoOf(config.world.backend).ranks_share_process ? config.world.world_size : 1,
      "--model");
}

absl::StatusOr<SequenceModelSpec> Validate(const VarlenConfig& config) {
  DDPKIT_ASSIGN_OR_RETURN(SequenceModelSpec spec, ParseSequenceModelSpec(config.model));
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--batch-size", config.batch_size));
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--lr", config.lr, 0));
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--max-tokens", static_cast<double>(config.max_tokens), 0));
  DDPKIT_RETURN_IF_ERROR(
      RequireAtLeast("--ref-batch-size", static_cast<double>(config.ref_batch_size), 0));
  DDPKIT_RETURN_IF_ERROR(
      RequirePositive("--sort-samples", static_cast<double>(config.sort.samples_per_rank)));
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--epochs", config.epochs));
  if (config.epochs > kMaxSteps) {
    return absl::InvalidArgumentError(StrCat("--epochs must be at most ", kMaxSteps));
  }
  DDPKIT_RETURN_IF_ERROR(
      RequirePositive("--length-buckets", static_cast<double>(config.curriculum.buckets)));
  DDPKIT_RETURN_IF_ERROR(RequireOneOf("--optimizer", config.optimizer, {"sgd", "zero-sgd"}));
  if (!config.weights_path.empty()) {
    return absl::InvalidArgumentError(
        "varlen builds its sequence model from --seed; --weights is not supported");
  }
  if (!config.comm_hook.empty()) {
    DDPKIT_RETURN_IF_ERROR(reducer::ValidateCommHookName(config.comm_hook));
  }
  if (reducer::IsPowerSgdHookName(config.comm_hook)) {
    DDPKIT_RETURN_IF_ERROR(reducer::ValidatePowerSgdOptions(config.powersgd));
  }
  if (config.data_path.empty()) DDPKIT_RETURN_IF_ERROR(ValidateSynthetic(config.synthetic));
  DDPKIT_RETURN_IF_ERROR(CheckModelFits(config, spec));
  return spec;
}

absl::StatusOr<SequenceData> LoadData(const VarlenConfig& config, const SequenceModelSpec& spec) {
  if (!config.data_path.empty()) {
    return LoadSequenceData(config.data_path, spec.vocab, spec.classes);
  }
  SyntheticSequenceOptions options = config.synthetic;
  options.vocab = spec.vocab;
  options.classes = spec.classes;
  options.seed = config.seed + 1;
  return MakeSyntheticSequences(options);
}

// Every sample must fit in a batch of its own.
absl::Status CheckBudget(const VarlenConfig& config, const SequenceData& data) {
  if (config.max_tokens == 0) return absl::OkStatus();
  for (int64_t id = 0; id < data.samples(); ++id) {
    if (data.length(id) > config.max_tokens) {
      return absl::InvalidArgumentError(StrCat(
          "--max-tokens ", config.max_tokens, " is less than sample ", id, "'s length ",
          data.length(id), ": every sample must fit in a batch on its own; raise --max-tokens"));
    }
  }
  return absl::OkStatus();
}

std::string BatchingName(const VarlenConfig& config, bool token_budget) {
  return token_budget ? StrCat("max ", config.max_tokens, " tokens")
                      : StrCat("fixed ", config.batch_size);
}

std::vector<Batch> CutIntoBatches(const VarlenConfig& config, const RankOrder& order,
                                  bool token_budget) {
  if (!token_budget) return FixedSizeBatches(order.lengths, config.batch_size);
  // CheckBudget ran: every sample fits.
  return *TokenBudgetBatches(order.lengths, order.ids, config.max_tokens);
}

// What one rank knows after planning: its own order and batches, and every rank's batches.
struct Plan {
  RankOrder order;
  std::vector<Batch> batches;
  std::vector<std::vector<int64_t>> sizes;  // [step][rank] batch sizes (0: joined)
  std::vector<int64_t> global;              // [step] the global batch
  std::vector<int64_t> longest;             // [step] over ranks
  std::vector<double> lr;                   // [step]
  int64_t ref_batch = 0;                    // the global batch --lr is for
};

// Costs one layout: every rank's batches shared, then summed up.
absl::StatusOr<LayoutReport> CostLayout(comm::ProcessGroup& group, const VarlenConfig& config,
                                        std::string name, const RankOrder& order, bool token_budget,
                                        std::vector<std::vector<Batch>>* all = nullptr) {
  DDPKIT_ASSIGN_OR_RETURN(std::vector<std::vector<Batch>> batches,
                          ShareBatches(group, CutIntoBatches(config, order, token_budget)));
  const LayoutCost cost = CostOf(batches);
  LayoutReport layout;
  layout.set_name(std::move(name));
  layout.set_batching(BatchingName(config, token_budget));
  layout.set_steps(cost.steps);
  for (int64_t n : cost.batches_per_rank) layout.add_batches_per_rank(n);
  layout.set_mean_imbalance(cost.mean_imbalance);
  layout.set_worst_imbalance(cost.worst_imbalance);
  layout.set_sync_cost(cost.sync_cost);
  layout.set_tokens(cost.tokens);
  layout.set_padded_tokens(cost.padded_total);
  layout.set_padding_waste(cost.padding_waste);
  for (size_t r = 0; r < batches.size(); ++r) {
    RankSeries* series = layout.add_padded_per_step();
    for (const std::vector<int64_t>& step : cost.padded) series->add_values(step[r]);
  }
  if (all != nullptr) *all = std::move(batches);
  return layout;
}

// The step table every rank derives from every rank's batches: sizes, global batch, LR.
void ScheduleSteps(const VarlenConfig& config, const std::vector<std::vector<Batch>>& all,
                   Plan& plan) {
  size_t steps = 0;
  for (const std::vector<Batch>& b : all) steps = std::max(steps, b.size());
  int64_t samples = 0;
  for (size_t t = 0; t < steps; ++t) {
    std::vector<int64_t>& sizes = plan.sizes.emplace_back();
    int64_t global = 0, longest = 0;
    for (const std::vector<Batch>& b : all) {
      sizes.push_back(t < b.size() ? b[t].count() : 0);
      global += sizes.back();
      if (t < b.size()) longest = std::max(longest, b[t].longest);
    }
    plan.global.push_back(global);
    plan.longest.push_back(longest);
    samples += global;
  }
  // By default the LR is the one for the run's mean global batch.
  plan.ref_batch =
      config.ref_batch_size > 0
          ? config.ref_batch_size
          : std::max<int64_t>(1, samples / std::max<int64_t>(1, std::ssize(plan.global)));
  for (int64_t global : plan.global) {
    plan.lr.push_back(ScaledLr(config.lr, config.lr_scaling, global, plan.ref_batch));
  }
}

// Costs the layouts before and after the sort (fixed-size, and token-budget batches when a
// budget is set) and plans the trained one: sorted globally, with the configured batching.
absl::StatusOr<Plan> PlanLayouts(comm::ProcessGroup& group, const VarlenConfig& config,
                                 const SequenceData& data, VarlenReport& report) {
  comm::ScopedCollectiveTag tag({.purpose = "job"});
  const std::vector<int64_t> share =
      ShuffledShare(data.samples(), group.size(), group.rank(), config.seed);
  RankOrder shuffled{.ids = share};
  for (int64_t id : share) shuffled.lengths.push_back(data.length(id));
  const RankOrder per_rank = SortedPerRank(data, share, config.curriculum.order);
  SortStats sort;
  Plan plan;
  DDPKIT_ASSIGN_OR_RETURN(plan.order,
                          SortedGlobally(group, data, share, config.curriculum, config.sort, sort));
  SortReport* s = report.mutable_sort();
  for (int64_t n : sort.input_sizes) s->add_input_sizes(n);
  for (int64_t n : sort.shard_sizes) s->add_shard_sizes(n);
  s->set_shard_bound(sort.shard_bound);
  s->set_samples_per_rank(config.sort.samples_per_rank);

  const bool budget = config.max_tokens > 0;
  std::vector<bool> batchings = {false};
  if (budget) batchings.push_back(true);
  std::vector<std::vector<Batch>> trained;
  const std::pair<std::string, const RankOrder*> layouts[] = {
      {"shuffled", &shuffled}, {"sorted per rank", &per_rank}, {"sorted globally", &plan.order}};
  for (bool token_budget : batchings) {
    for (const auto& [name, order] : layouts) {
      const bool is_trained = order == &plan.order && token_budget == budget;
      DDPKIT_ASSIGN_OR_RETURN(
          LayoutReport layout,
          CostLayout(group, config, name, *order, token_budget, is_trained ? &trained : nullptr));
      layout.set_trained(is_trained);
      *report.add_layouts() = std::move(layout);
    }
  }
  plan.batches = trained[group.rank()];
  ScheduleSteps(config, trained, plan);
  return plan;
}

// This rank's ids of batch `b`.
std::vector<int64_t> IdsOf(const Plan& plan, const Batch& b) {
  return {plan.order.ids.begin() + b.begin, plan.order.ids.begin() + b.end};
}

// Every rank's ids at `step` (a step every rank has a batch in), in rank order.
absl::StatusOr<std::vector<std::vector<int64_t>>> ShareStepIds(comm::ProcessGroup& group,
                                                               const Plan& plan, int step) {
  const std::vector<int64_t>& sizes = plan.sizes[step];
  const std::vector<int64_t> mine = IdsOf(plan, plan.batches[step]);
  Tensor all = Tensor::Empty({plan.global[step]}, DType::kInt64);
  DDPKIT_RETURN_IF_ERROR(
      WaitFor(group.AllgatherV(Tensor::FromVector<int64_t>(mine, {std::ssize(mine)}), all, sizes),
              "sharing the checked step's samples"));
  std::vector<std::vector<int64_t>> ids;
  const int64_t* v = all.data<int64_t>();
  for (int64_t n : sizes) {
    ids.emplace_back(v, v + n);
    v += n;
  }
  return ids;
}

// One rank of the run.
struct Rank {
  comm::ProcessGroup& group;
  const VarlenConfig& config;
  const SequenceData& data;
  Plan plan = {};
  std::shared_ptr<nn::Module> model = nullptr;
  std::shared_ptr<reducer::DistributedDataParallel> ddp = nullptr;
  RankOptimizer optimizer = {};
  Device device = Device::Cpu();
  std::vector<double> loss_sums = {};  // [epoch * steps + step]: this rank's summed cross-entropy
};

absl::StatusOr<std::shared_ptr<nn::Module>> BuildSequenceModel(const SequenceModelSpec& spec,
                                                               const VarlenConfig& config,
                                                               Device device) {
  auto model = std::make_shared<SequenceClassifier>(spec, config.seed);
  if (device.is_cuda()) {
    DDPKIT_RETURN_IF_ERROR(cuda::CheckUsable(device));
    model->To(device);  // initialised on the host, so a GPU run starts from the same weights
  }
  return model;
}

// The averaging check, before any step changes the weights; skipped (step -1) when no step
// has a batch on every rank.
absl::Status CheckGradientWeighting(Rank& rank, const SequenceModelSpec& spec,
                                    VarlenReport& report) {
  const int step = MostUnevenSharedStep(rank.plan.sizes);
  if (step < 0) {
    report.mutable_weighting_check()->set_step(-1);
    return absl::OkStatus();
  }
  comm::ScopedCollectiveTag tag({.purpose = "job"});
  DDPKIT_ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> ids,
                          ShareStepIds(rank.group, rank.plan, step));
  DDPKIT_ASSIGN_OR_RETURN(std::shared_ptr<nn::Module> reference,
                          BuildSequenceModel(spec, rank.config, rank.device));
  DDPKIT_ASSIGN_OR_RETURN(*report.mutable_weighting_check(),
                          CheckWeighting(*rank.ddp, *reference, rank.data, ids, step));
  return absl::OkStatus();
}

// This rank's own steps of one epoch: each at the scheduled LR, its loss weighted as
// configured.
void TrainEpoch(Rank& rank, int epoch) {
  const Plan& plan = rank.plan;
  std::vector<int64_t> ids;
  const TrainingStep step{
      .optimizer = rank.optimizer.optimizer.get(),
      .ddp = rank.ddp.get(),
      .load = [&](int t, int) { ids = IdsOf(plan, plan.batches[t]); },
      .forward =
          [&](int t, int) {
            Tensor logits = rank.ddp->Forward(PackBatch(rank.data, ids, rank.device));
            Tensor loss = CrossEntropy(logits, BatchLabels(rank.data, ids, rank.device),
                                       {.reduction = Reduction::kSum});
            rank.loss_sums[epoch * plan.global.size() + t] = loss.item();
            return loss * LossScale(rank.config.grad_weighting, std::ssize(ids), plan.global[t],
                                    rank.group.size());
          },
      .before_optimizer =
          [&](int t) {
            rank.optimizer.optimizer->set_lr(plan.lr[t]);
            return absl::OkStatus();
          }};
  // Its hooks return no errors; a failed collective throws, which Join needs to see.
  const absl::Status status =
      RunTrainingLoop(step, {.steps = static_cast<int>(plan.batches.size())});
  if (!status.ok()) ThrowStatus(status);
}

// Each epoch inside its own Join, as a PyTorch loop does (`with Join([ddp]): for batch in ...`):
// the ranks meet again at every epoch's end, so every epoch follows the same step table.
void TrainUnderJoin(Rank& rank) {
  const std::vector<join::Joinable*> joinables = JoinablesOf(*rank.ddp, rank.optimizer.zero);
  for (int epoch = 0; epoch < rank.config.epochs; ++epoch) {
    join::Join::Run(joinables, {}, [&] { TrainEpoch(rank, epoch); });
  }
}

// Top-1 accuracy over every sample, in batches.
double AccuracyOverAll(nn::Module& model, const SequenceData& data, Device device) {
  NoGradGuard no_grad;
  int64_t correct = 0;
  constexpr int64_t kChunk = 256;
  for (int64_t first = 0; first < data.samples(); first += kChunk) {
    std::vector<int64_t> ids;
    for (int64_t id = first; id < std::min(data.samples(), first + kChunk); ++id) ids.push_back(id);
    const Tensor logits = model.Forward(PackBatch(data, ids, device)).To(Device::Cpu());
    const std::vector<double> values = logits.ToDoubles();
    const int64_t classes = logits.size(1);
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto row = values.begin() + static_cast<int64_t>(i) * classes;
      correct += std::max_element(row, row + classes) - row == data.labels.data<int64_t>()[ids[i]];
    }
  }
  return static_cast<double>(correct) / static_cast<double>(data.samples());
}

// After every rank's loop: the per-step global losses, the final models compared, accuracy.
absl::Status Summarize(Rank& rank, VarlenReport& report) {
  comm::ScopedCollectiveTag tag({.purpose = "job"});
  const Plan& plan = rank.plan;
  Tensor sums = Tensor::FromVector<double>(rank.loss_sums, {std::ssize(rank.loss_sums)});
  if (sums.numel() > 0) {
    DDPKIT_RETURN_IF_ERROR(WaitFor(rank.group.Allreduce(sums), "summing the step losses"));
  }
  for (size_t i = 0; i < rank.loss_sums.size(); ++i) {
    const size_t t = i % plan.global.size();
    StepReport* step = report.add_steps();
    step->set_step(static_cast<int>(i));
    step->set_epoch(static_cast<int>(i / plan.global.size()));
    for (int64_t n : plan.sizes[t]) step->add_batch_sizes(n);
    step->set_global_batch(plan.global[t]);
    step->set_longest(plan.longest[t]);
    step->set_lr(plan.lr[t]);
    step->set_loss(sums.data<double>()[i] / static_cast<double>(plan.global[t]));
  }
  DDPKIT_ASSIGN_OR_RETURN(const bool identical, ModelsIdentical(*rank.model, rank.group));
  report.set_models_identical(identical);
  report.set_final_accuracy(AccuracyOverAll(*rank.model, rank.data, rank.device));
  if (rank.group.rank() == 0 && !rank.config.save_weights_path.empty()) {
    DDPKIT_RETURN_IF_ERROR(SaveStateDict(*rank.model, rank.config.save_weights_path));
  }
  return absl::OkStatus();
}

// PREFIX.rank<r>.safetensors: the samples this rank trains on, in order.
absl::Status DumpShard(const std::string& prefix, int rank, const RankOrder& order) {
  const int64_t n = std::ssize(order.ids);
  return WriteSafetensors(StrCat(prefix, ".rank", rank, ".safetensors"),
                          {{"ids", Tensor::FromVector<int64_t>(order.ids, {n})},
                           {"lengths", Tensor::FromVector<int64_t>(order.lengths, {n})}});
}

void DescribeRun(const VarlenConfig& config, const SequenceData& data,
                 const comm::ProcessGroup& group, VarlenReport& report) {
  report.set_rank(group.rank());
  report.set_model(config.model);
  report.set_data(data.description);
  report.set_samples(data.samples());
  report.set_tokens(data.tokens.numel());
  const std::vector<double> lengths = data.lengths.ToDoubles();
  report.set_shortest(static_cast<int64_t>(*std::min_element(lengths.begin(), lengths.end())));
  report.set_longest(static_cast<int64_t>(*std::max_element(lengths.begin(), lengths.end())));
  report.set_world_size(group.size());
  report.set_backend(std::string(group.backend_name()));
  report.set_order(std::string(CurriculumOrderName(config.curriculum.order)));
  report.set_max_tokens(config.max_tokens);
  report.set_batch_size(config.batch_size);
  report.set_lr(config.lr);
  report.set_lr_scaling(std::string(LrScalingName(config.lr_scaling)));
  report.set_epochs(config.epochs);
  report.set_grad_weighting(std::string(GradWeightingName(config.grad_weighting)));
  report.set_join(config.use_join);
  report.set_shards_prefix(config.dump_shards_prefix);
}

absl::StatusOr<VarlenReport> RunOnRank(const VarlenConfig& config, const SequenceModelSpec& spec,
                                       const SequenceData& data, comm::ProcessGroup& group) {
  VarlenReport report;
  DescribeRun(config, data, group, report);
  Rank rank{.group = group, .config = config, .data = data};
  rank.device = RankDevice(config.device, group);
  DDPKIT_ASSIGN_OR_RETURN(rank.plan, PlanLayouts(group, config, data, report));
  report.set_ref_batch_size(rank.plan.ref_batch);
  if (!config.dump_shards_prefix.empty()) {
    DDPKIT_RETURN_IF_ERROR(DumpShard(config.dump_shards_prefix, group.rank(), rank.plan.order));
  }
  DDPKIT_ASSIGN_OR_RETURN(rank.model, BuildSequenceModel(spec, config, rank.device));
  DDPKIT_ASSIGN_OR_RETURN(rank.ddp, WrapInDdp(config, rank.model, group));
  DDPKIT_ASSIGN_OR_RETURN(rank.optimizer, MakeOptimizer(config, *rank.model, group));
  DDPKIT_RETURN_IF_ERROR(CheckGradientWeighting(rank, spec, report));
  rank.loss_sums.assign(config.epochs * rank.plan.global.size(), 0.0);
  if (config.use_join) {
    TrainUnderJoin(rank);
  } else {
    // A plain loop: a rank with fewer batches runs into the next epoch, pairing its
    // collectives with another rank's last batches, and leaves first at the very end.
    for (int epoch = 0; epoch < config.epochs; ++epoch) TrainEpoch(rank, epoch);
    // A rank that ran out leaves, as a process whose loop ended would; the ranks still
    // training fail in their next collective with the comm layer's diagnosis.
    if (rank.plan.batches.size() != rank.plan.global.size()) {
      report.set_left_without_join(true);
      return report;
    }
  }
  DDPKIT_RETURN_IF_ERROR(Summarize(rank, report));
  return report;
}

}  // namespace

absl::StatusOr<VarlenReport> RunVarlen(const VarlenConfig& config) {
  DDPKIT_ASSIGN_OR_RETURN(const SequenceModelSpec spec, Validate(config));
  DDPKIT_ASSIGN_OR_RETURN(const SequenceData data, LoadData(config, spec));
  DDPKIT_RETURN_IF_ERROR(CheckBudget(config, data));
  const comm::WorldSpec world = config.world;
  return RunOnEveryRank<VarlenReport>(
      world, [&](comm::ProcessGroup& group) { return RunOnRank(config, spec, data, group); });
}

}  // namespace ddpkit::jobs
