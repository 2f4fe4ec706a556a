#include "tools/jobs/train/train_checkpoint.h"

#include "nlohmann/json.hpp"

namespace ddpkit::jobs {
namespace {

// Shortest text that reads back as the same double ("0.1", not "0.10000000000000001").
std::string Exact(double value) { return nlohmann::json(value).dump(); }

checkpoint::CheckpointSubject SubjectOf(const TrainConfig& config, comm::ProcessGroup& group,
                                        const TrainSubject& subject) {
  checkpoint::CheckpointSubject of{.model = subject.model,
                                   .optimizer = *subject.optimizer.optimizer,
                                   .sharded_optimizer = subject.optimizer.zero != nullptr,
                                   .settings = TrainCheckpointSettings(config, group.size()),
                                   .bucket_plan = std::nullopt,  // filled below
                                   .static_graph = std::nullopt};
  if (std::optional<reducer::BucketAssignment> plan = subject.reducer.RebuiltPlan()) {
    of.bucket_plan = checkpoint::BucketPlan{.buckets = std::move(plan->buckets),
                                            .limits = std::move(plan->limits)};
  }
  if (std::optional<reducer::StaticGraphRecord> record = subject.reducer.StaticGraphRecorded()) {
    of.static_graph =
        checkpoint::StaticGraphRecord{.hook_counts = std::move(record->hook_counts),
                                      .globally_unused = std::move(record->globally_unused)};
  }
  return of;
}

// The warning for a part of the checkpoint's DDP state that does not fit the model.
std::string NotUsedWarning(const checkpoint::ResumeOutcome& outcome, std::string_view part,
                           const absl::Status& why, std::string_view instead) {
  return StrCat(outcome.path, ": its DDP ", part, " is not used (", why.message(), "); DDP ",
                instead,
                ", so the resumed run may differ from an uninterrupted one in the last bits");
}

// Starts the reducer from the checkpoint's rebuilt plan (every rank reads the same one and
// checks it against the same model, so all adopt it or none does). A checkpoint without one
// (older, or written before the rebuild) resumes as before: DDP rebuilds after its first step.
void AdoptBucketPlan(const checkpoint::ResumeOutcome& outcome, reducer::Reducer& reducer,
                     std::vector<std::string>& warnings) {
  if (!outcome.bucket_plan) return;
  const absl::Status adopted = reducer.AdoptRebuiltBuckets(
      {.buckets = outcome.bucket_plan->buckets, .limits = outcome.bucket_plan->limits});
  if (adopted.ok()) return;
  warnings.push_back(NotUsedWarning(outcome, "bucket plan", adopted, "rebuilds its buckets anew"));
}

// Starts static graph from the checkpoint's record of its first synced backward (every rank
// reads rank 0's: ddpkit train runs one graph on every rank). Ignored by a DDP without static
// graph, which counts no hooks; a checkpoint without one resumes as before: DDP counts hooks in
// its first step again.
void AdoptStaticGraphRecord(const checkpoint::ResumeOutcome& outcome, reducer::Reducer& reducer,
                            std::vector<std::string>& warnings) {
  if (!outcome.static_graph || !reducer.static_graph()) return;
  const absl::Status adopted =
      reducer.AdoptStaticGraphRecord({.hook_counts = outcome.static_graph->hook_counts,
                                      .globally_unused = outcome.static_graph->globally_unused});
  if (adopted.ok()) return;
  warnings.push_back(NotUsedWarning(outcome, "static graph record", adopted,
                                    "counts the hooks again in its first step"));
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
                                   const TrainSubject& subject, TrainReport& report,
                                   const TrainObserver& observer) {
  if (!config.checkpoint.enabled()) return 0;
  DDPKIT_ASSIGN_OR_RETURN(checkpoint::ResumeOutcome outcome,
                          checkpoint::ResumeFromLatestCheckpoint(
                              config.checkpoint.dir, group, SubjectOf(config, group, subject)));
  const bool lead = group.rank() == 0;
  AdoptBucketPlan(outcome, subject.reducer, outcome.warnings);
  AdoptStaticGraphRecord(outcome, subject.reducer, outcome.warnings);
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
                             const TrainSubject& subject, int steps_done, TrainReport& report) {
  if (!config.checkpoint.enabled()) return absl::OkStatus();
  if (steps_done % config.checkpoint.every != 0 && steps_done != config.steps) {
    return absl::OkStatus();
  }
  DDPKIT_ASSIGN_OR_RETURN(
      const std::string path,
      checkpoint::SaveCheckpoint(
          config.checkpoint, group, SubjectOf(config, group, subject),
          {.step = steps_done, .next_micro_batch = NextMicroBatch(config, steps_done)}));
  report.add_checkpoints_written(path);
  return absl::OkStatus();
}

}  // namespace ddpkit::jobs
