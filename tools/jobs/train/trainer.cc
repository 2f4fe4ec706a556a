#include "tools/jobs/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "autograd/compute_threads.h"
#include "autograd/gemm.h"
#include "autograd/host_allocator.h"
#include "autograd/nn/safetensors.h"
#include "autograd/ops.h"
#include "comm/world/thread_budget.h"
#include "reducer/extras/named_comm_hook.h"
#include "tools/jobs/dataset.h"
#include "tools/jobs/one_process_reference.h"
#include "tools/jobs/train/sample.h"
#include "tools/jobs/train/train_checkpoint.h"
#include "tools/jobs/training_loop.h"
#include "tools/trace/session.h"

namespace ddpkit::jobs {
namespace {

// What one rank builds before its loop.
struct Rank {
  comm::ProcessGroup& group;
  trace::TraceRecorder* trace = nullptr;  // null unless --trace
  std::shared_ptr<nn::Module> model = nullptr;
  ClassificationData data = {};
  ClassificationData held_out = {};  // --eval-data's rows (read before the first step)
  std::shared_ptr<reducer::DistributedDataParallel> ddp = nullptr;
  RankOptimizer optimizer = {};
  Device device = {};  // where the model and the batches live
};

absl::Status Validate(const TrainConfig& config) {
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--steps", config.steps, 0));
  if (config.steps > kMaxSteps) {
    return absl::InvalidArgumentError(
        StrCat("--steps ", config.steps, " is more than ", kMaxSteps,
               " (the report keeps a loss per step); run in parts with --checkpoint-dir"));
  }
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--grad-accum", config.grad_accum, 1));
  if (config.reference_one_process) DDPKIT_RETURN_IF_ERROR(CheckReferenceApplies(config));
  if (!config.text_path.empty() && !config.data_path.empty()) {
    return absl::InvalidArgumentError("--text and --data both name the data; give one");
  }
  // Before any rank starts: a rank that fails to read its data would fail its peers'
  // collectives too, and leave their flight recorders behind for nothing.
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string&>{"--data", config.data_path},
        {"--text", config.text_path},
        {"--eval-data", config.eval_path}}) {
    if (!path.empty() && ::access(path.c_str(), R_OK) != 0) {
      return absl::NotFoundError(
          StrCat(flag, " '", path, "' cannot be read: ", std::strerror(errno)));
    }
  }
  if (config.checkpoint.enabled() && reducer::IsPowerSgdHookName(config.comm_hook)) {
    return absl::InvalidArgumentError(
        StrCat("--checkpoint-dir with --comm-hook ", config.comm_hook,
               ": PowerSGD's per-bucket error and warm-start Qs are not checkpointed, so a resumed "
               "run would not continue the same training"));
  }
  return checkpoint::ValidateCheckpointOptions(config.checkpoint);
}

absl::StatusOr<ClassificationData> LoadData(const TrainConfig& config,
                                            const models::ModelSpec& model) {
  if (!config.text_path.empty()) return LoadTextData(config.text_path, model.io);
  if (config.data_path.empty()) {
    return MakeSyntheticData(config.synthetic_rows, model.io, config.seed + 1);
  }
  return LoadClassificationData(config.data_path, model.io);
}

// Room for every record of the run: per micro-batch two spans, a no_sync mark and a hook per
// parameter; per step finalize, the optimizer, at most one bucket ready, launched and reduced
// per parameter, and a few collectives (PowerSGD issues up to three per bucket).
trace::TraceCapacity TraceCapacityFor(const TrainConfig& config, const models::ModelSpec& model) {
  const size_t params = model.parameter_tensors;
  const size_t steps = config.steps, micro = config.grad_accum;
  const size_t per_bucket = reducer::IsPowerSgdHookName(config.comm_hook) ? 3 : 1;
  return {.compute = steps * (micro * (params + 3) + 3 * params + 2) + 1024,
          .collectives = steps * (per_bucket * params + 8) + 1024};
}

absl::StatusOr<Rank> SetUp(const TrainConfig& config, const models::ModelSpec& model,
                           comm::ProcessGroup& group, trace::TraceSession& trace) {
  Rank rank{.group = group};
  DDPKIT_ASSIGN_OR_RETURN(rank.trace, trace.BeginRank(group, TraceCapacityFor(config, model)));
  TrainConfig placed = config;
  placed.device = rank.device = RankDevice(config.device, group);
  DDPKIT_ASSIGN_OR_RETURN(rank.model, BuildModel(placed));
  DDPKIT_ASSIGN_OR_RETURN(rank.data, LoadData(config, model));
  if (!config.eval_path.empty()) {
    DDPKIT_ASSIGN_OR_RETURN(rank.held_out, LoadClassificationData(config.eval_path, model.io));
  }
  DDPKIT_ASSIGN_OR_RETURN(rank.ddp, WrapInDdp(config, rank.model, group));
  if (rank.trace != nullptr) rank.ddp->reducer().SetTraceObserver(rank.trace);
  DDPKIT_ASSIGN_OR_RETURN(rank.optimizer, MakeOptimizer(config, *rank.model, group));
  return rank;
}

// The report's setup fields: everything known before the first step.
TrainReport DescribeSetup(const TrainConfig& config, const Rank& rank) {
  TrainReport report;
  report.set_rank(rank.group.rank());
  report.set_model(config.model);
  for (const auto& [name, p] : rank.model->NamedParameters()) report.add_parameter_names(name);
  report.set_num_parameters(ParameterElements(*rank.model));
  report.set_data(rank.data.description);
  report.set_backend(std::string(rank.group.backend_name()));
  report.set_world_size(rank.group.size());
  report.set_compute_threads(ComputeThreads());
  if (absl::StatusOr<comm::ThreadBudget> budget = comm::ResolveThreadBudget(config.world);
      budget.ok()) {
    report.set_thread_budget(budget->ToString());
  }
  report.set_gemm_library(std::string(GemmLibraryName(CurrentGemmLibrary())));
  report.set_batch_size(config.batch_size);
  report.set_grad_accum(config.grad_accum);
  report.set_steps(config.steps);
  report.set_lr(config.lr);
  report.set_momentum(config.momentum);
  report.set_seed(config.seed);
  report.set_optimizer(config.optimizer);
  report.set_loss(config.loss);
  report.set_elements_stepped(rank.optimizer.elements_stepped);
  *report.mutable_ddp() = rank.ddp->LoggingData();
  return report;
}

// Saves what .grad holds now: the averaged, accumulated gradients the step is about to apply.
absl::Status SaveGrads(const nn::Module& model, const std::string& path) {
  NamedTensors grads;
  for (const auto& [name, p] : model.NamedParameters()) {
    if (p.grad().defined()) grads.emplace_back(name, p.grad());
  }
  return WriteSafetensors(path, grads);
}

// One optimizer step: grad_accum micro-batches, all but the last under no_sync, then the
// update. Adds each micro-batch's loss to `loss_sum`; rank 0 saves the last step's gradients.
TrainingStep StepOf(const TrainConfig& config, Rank& rank, Tensor& x, Tensor& y, double& loss_sum) {
  const int64_t b = config.batch_size, global_batch = rank.group.size() * b;
  return {.optimizer = rank.optimizer.optimizer.get(),
          .ddp = rank.ddp.get(),
          .trace = rank.trace,
          .micro_batches = config.grad_accum,
          .load =
              [&, b, global_batch](int step, int k) {
                const int64_t g = static_cast<int64_t>(step) * config.grad_accum + k;
                GatherRows(rank.data, g * global_batch + rank.group.rank() * b, b, x, y);
              },
          .forward =
              [&](int step, int k) {
                // Iteration g of a model with control flow: its micro-batch's global index.
                rank.model->SetForwardContext(
                    {rank.group.rank(), static_cast<int64_t>(step) * config.grad_accum + k});
                return TrainingLoss(config.loss, rank.ddp->Forward(x), y);
              },
          .after_backward = [&](int, int, const Tensor& loss) { loss_sum += loss.item(); },
          .before_optimizer = [&](int step) -> absl::Status {
            const bool last = step + 1 == config.steps;
            if (last && rank.group.rank() == 0 && !config.save_grads_path.empty()) {
              return SaveGrads(*rank.model, config.save_grads_path);
            }
            return absl::OkStatus();
          }};
}

// After the loop: each step's loss as the mean over all ranks (equal batches: the global mean),
// rank 0's accuracy on all rows, the median step time, and rank 0's saved weights.
absl::Status Finish(const TrainConfig& config, Rank& rank, int first_step, Tensor& losses,
                    const std::vector<double>& step_ms, TrainReport& report) {
  comm::ScopedCollectiveTag tag({.purpose = "job"});
  if (config.steps > 0) DDPKIT_RETURN_IF_ERROR(rank.group.Allreduce(losses)->Wait());
  for (int step = first_step; step < config.steps; ++step) {
    report.add_losses(losses.data<double>()[step] / rank.group.size());
  }
  // Rank 0 alone evaluates: after a synced step every rank holds the same model, and N ranks
  // sharing a machine's cores would each spend the same seconds on one number (a 20-step GPT
  // on 4 thread ranks of a 2-core machine, medians of 5 interleaved runs: 8.9 s with every rank
  // evaluating, 4.9 s with one).
  // No collective follows, so no rank's --timeout runs while it evaluates.
  if (rank.group.rank() == 0) {
    report.set_final_accuracy(Accuracy(*rank.model, rank.data));
    if (!config.eval_path.empty()) {
      report.set_eval_accuracy(Accuracy(*rank.model, rank.held_out));
      report.set_eval_data(rank.held_out.description);
    }
    report.set_sample(SampleText(*rank.model, rank.data, rank.data.x.size(1), 200, config.seed));
  }
  report.set_median_step_ms(Median(step_ms));
  if (rank.group.rank() == 0 && !config.save_weights_path.empty()) {
    DDPKIT_RETURN_IF_ERROR(SaveStateDict(*rank.model, config.save_weights_path));
  }
  *report.mutable_ddp() = rank.ddp->LoggingData();
  return absl::OkStatus();
}

// Rank 0: every step again as one process on its global batch (each micro-batch the rows all
// ranks trained on), from the same initial weights, against DDP's final model.
absl::Status CompareWithReference(const TrainConfig& config, const Rank& rank,
                                  TrainReport& report) {
  const int world = rank.group.size();
  const int64_t global_batch = world * static_cast<int64_t>(config.batch_size);
  const ReferencePlan plan{
      .iterations = config.steps,
      .micro_batches = config.grad_accum,
      .rows =
          [&](int step, int k) {
            const int64_t g = static_cast<int64_t>(step) * config.grad_accum + k;
            return std::vector<RowSlice>{{&rank.data, g * global_batch, global_batch}};
          },
      .loss_scale = [&](int) { return DdpLossScale(config.loss, world, world, true); }};
  DDPKIT_ASSIGN_OR_RETURN(const ReferenceComparison c,
                          CompareWithOneProcess(config, *rank.model, plan));
  SetReferenceFields(c, report);
  return absl::OkStatus();
}

absl::StatusOr<TrainReport> TrainOnRank(const TrainConfig& config, const models::ModelSpec& model,
                                        comm::ProcessGroup& group, const TrainObserver& observer,
                                        trace::TraceSession& trace) {
  DDPKIT_ASSIGN_OR_RETURN(Rank rank, SetUp(config, model, group, trace));
  TrainReport report = DescribeSetup(config, rank);
  const bool lead = group.rank() == 0;
  const TrainSubject subject{*rank.model, rank.optimizer, rank.ddp->reducer()};
  DDPKIT_ASSIGN_OR_RETURN(const int first_step,
                          ResumeTraining(config, group, subject, report, observer));
  if (lead && observer.on_start) observer.on_start(report);

  Tensor x = BatchLike(rank.data.x, config.batch_size, rank.device);
  Tensor y = BatchLike(rank.data.y, config.batch_size, rank.device);
  Tensor losses = Tensor::Zeros({config.steps}, DType::kFloat64);
  std::vector<double> step_ms;
  // Host memory the caching allocator had to ask this rank's thread's system for once warm.
  constexpr int kWarmSteps = 2;
  int64_t system_allocations_when_warm = -1;
  double loss_sum = 0;
  const TrainingLoop loop{
      .first_step = first_step,
      .steps = config.steps,
      .before_step =
          [&](int step) {
            if (step == first_step + kWarmSteps) {
              system_allocations_when_warm = ThisThreadSystemAllocations();
            }
            loss_sum = 0;
          },
      .after_step = [&](int step, double ms) -> absl::Status {
        const double loss = loss_sum / config.grad_accum;
        step_ms.push_back(ms);
        losses.data<double>()[step] = loss;
        if (lead && observer.on_step) {
          observer.on_step({step + 1, config.steps, loss, ms, &rank.ddp->LoggingData()});
        }
        return CheckpointIfDue(config, group, subject, step + 1, report);
      }};
  DDPKIT_RETURN_IF_ERROR(RunTrainingLoop(StepOf(config, rank, x, y, loss_sum), loop));
  if (system_allocations_when_warm >= 0) {
    report.set_host_allocations_when_warm(ThisThreadSystemAllocations() -
                                          system_allocations_when_warm);
  }
  report.set_host_cache(GetHostAllocatorStats().caching);
  trace.EndRank(group, rank.ddp->LoggingData());
  if (config.check_models_identical) {  // before rank 0's evaluation, which no rank waits for
    comm::ScopedCollectiveTag tag({.purpose = "job"});
    DDPKIT_ASSIGN_OR_RETURN(const bool identical, ModelsIdentical(*rank.model, group));
    report.set_models_identical(identical);
  }
  DDPKIT_RETURN_IF_ERROR(Finish(config, rank, first_step, losses, step_ms, report));
  if (config.reference_one_process && lead) {
    DDPKIT_RETURN_IF_ERROR(CompareWithReference(config, rank, report));
  }
  return report;
}

}  // namespace

absl::StatusOr<TrainReport> Train(const TrainConfig& config, const TrainObserver& observer) {
  DDPKIT_ASSIGN_OR_RETURN(const models::ModelSpec model, ValidateDdpTraining(config));
  DDPKIT_RETURN_IF_ERROR(Validate(config));
  if (!config.text_path.empty() && !model.io.per_position) {
    return absl::InvalidArgumentError(
        StrCat("--text ", config.text_path, ": the model ", config.model,
               " does not take token rows; use a language model, e.g. --model "
               "gpt:layers=2,heads=2,dim=64,ctx=32,vocab=65"));
  }
  const bool synthetic = config.data_path.empty() && config.text_path.empty();
  const double data_bytes =  // a file's size is checked as it is read
      synthetic ? 8.0 * static_cast<double>(config.synthetic_rows) *
                      static_cast<double>(NumElements(model.io.synthetic_row) + 1)
                : 0;
  DDPKIT_RETURN_IF_ERROR(CheckFitsInMemory(
      EstimateRankBytes(model, config.batch_size, data_bytes),
      comm::InfoOf(config.world.backend).ranks_share_process ? config.world.world_size : 1,
      "--model, --batch-size and --world-size"));
  trace::TraceSession trace(config.trace_path, "train", config.world);
  DDPKIT_ASSIGN_OR_RETURN(TrainReport report,
                          RunOnEveryRank<TrainReport>(config.world, [&](comm::ProcessGroup& group) {
                            return TrainOnRank(config, model, group, observer, trace);
                          }));
  DDPKIT_RETURN_IF_ERROR(trace.Write().status());
  return report;
}

}  // namespace ddpkit::jobs
