#include "tools/jobs/train/train_checkpoint.h"

#include "nlohmann/json.hpp"

namespace ddpkit::jobs {
namespace {

// Shortest text that reads back as the same double ("0.1", not "0.10000000000000001").
std::string Exact(double value) { return nlohmann::json(value).dump(); }

checkpoint::CheckpointSubject SubjectOf(const TrainConfig& config, comm::ProcessGroup& group,
                                        nn::Module& model, const RankOptimizer& optimizer) {
  return {.model = model,
          .optimizer = *optimizer.optimizer,
          .sharded_optimizer = optimizer.zero != nullptr,
          .settings = TrainCheckpointSettings(config, group.size())};
}

// Global micro-batch g is rows [g*B, (g+1)*B): the step fixes where the data stands.
int64_t NextMicroBatch(const TrainConfig& config, int64_t steps_done) {
  return steps_done * config.grad_accum;
}

}  // namespace

checkpoint::CheckpointSettings TrainCheckpointSettings(const TrainConfig& config, int world_size) {
  return {{"--model", config.model},
          {"--world-size", StrCat(world_size)},
          {"--batch-size", StrCat(config.batch_size)},
          {"--grad-accum", StrCat(config.grad_accum)},
          {"--optimizer", config.optimizer},
          {"--lr", Exact(config.lr)},
          {"--momentum", Exact(config.momentum)},
          {"--seed", StrCat(config.seed)},
          {"--data", config.data_path.empty() ? StrCat("synthetic:", config.synthetic_rows)
                                              : config.data_path},
          {"--comm-hook", config.comm_hook.empty() ? "none" : config.comm_hook}};
}

absl::StatusOr<int> ResumeTraining(const TrainConfig& config, comm::ProcessGroup& group,
                                   nn::Module& model, const RankOptimizer& optimizer,
                                   TrainReport& report, const TrainObserver& observer) {
  if (!config.checkpoint.enabled()) return 0;
  DDPKIT_ASSIGN_OR_RETURN(
      checkpoint::ResumeOutcome outcome,
      checkpoint::ResumeFromLatestCheckpoint(config.checkpoint.dir, group,
                                             SubjectOf(config, group, model, optimizer)));
  const bool lead = group.rank() == 0;
  for (const std::string& warning : outcome.warnings) {
    report.add_checkpoint_warnings(warning);
    if (lead && observer.on_checkpoint) observer.on_checkpoint(warning, /*warning=*/true);
  }
  if (!outcome.position) return 0;
  const checkpoint::TrainingPosition& at = *outcome.position;
  if (at.next_micro_batch != NextMicroBatch(config, at.step)) {
    return absl::DataLossError(StrCat(outcome.path, ": next micro-batch ", at.next_micro_batch,
                                      " does not follow from step ", at.step));
  }
  report.set_resumed_from_step(static_cast<int32_t>(at.step));
  report.set_resumed_from(outcome.path);
  if (lead && observer.on_checkpoint) {
    observer.on_checkpoint(
        StrCat("resumed from step ", at.step, " (", outcome.path, ")",
               at.step >= config.steps
                   ? StrCat("; --steps ", config.steps, " already reached")
                   : StrCat("; running steps ", at.step + 1, "..", config.steps)),
        /*warning=*/false);
  }
  return static_cast<int>(at.step);
}

absl::Status CheckpointIfDue(const TrainConfig& config, comm::ProcessGroup& group,
                             nn::Module& model, const RankOptimizer& optimizer, int steps_done,
                             TrainReport& report) {
  if (!config.checkpoint.enabled()) return absl::OkStatus();
  if (steps_done % config.checkpoint.every != 0 && steps_done != config.steps) {
    return absl::OkStatus();
  }
  DDPKIT_ASSIGN_OR_RETURN(
      const std::string path,
      checkpoint::SaveCheckpoint(
          config.checkpoint, group, SubjectOf(config, group, model, optimizer),
          {.step = steps_done, .next_micro_batch = NextMicroBatch(config, steps_done)}));
  report.add_checkpoints_written(path);
  return absl::OkStatus();
}

}  // namespace ddpkit::jobs
