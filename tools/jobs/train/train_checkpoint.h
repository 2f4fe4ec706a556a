// What `ddpkit train` keeps in its checkpoints and how it starts from one: the settings a
// resume must share, the data position, and the calls the training loop makes.
#pragma once

#include "absl/status/statusor.h"
#include "reducer/reducer.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/jobs/train/trainer.h"

namespace ddpkit::jobs {

// The settings that change the numbers a run produces, as flags: a resume must share them.
// (--steps may grow; --weights only seeds step 0; the backend and DDP's bucketing options do
// not change the averaged gradients.)
checkpoint::CheckpointSettings TrainCheckpointSettings(const TrainConfig& config, int world_size);

// What a checkpoint saves and restores on one rank: the model, its optimizer, and the DDP whose
// rebuilt bucket plan the checkpoint keeps.
struct TrainSubject {
  nn::Module& model;
  const RankOptimizer& optimizer;
  reducer::Reducer& reducer;
};

// Collective. Without --checkpoint-dir: 0. Otherwise restores the latest usable checkpoint into
// `subject` and returns its step (0 when there is none), recording the resume and rank 0's
// warnings in `report` and telling `observer` (rank 0). The reducer starts from the
// checkpoint's rebuilt bucket plan; one that does not fit is a warning, and DDP rebuilds anew.
absl::StatusOr<int> ResumeTraining(const TrainConfig& config, comm::ProcessGroup& group,
                                   const TrainSubject& subject, TrainReport& report,
                                   const TrainObserver& observer);

// Collective. After `steps_done` optimizer steps: writes a checkpoint when one is due (every
// --checkpoint-every steps, and after the last) and records its folder in `report`.
absl::Status CheckpointIfDue(const TrainConfig& config, comm::ProcessGroup& group,
                             const TrainSubject& subject, int steps_done, TrainReport& report);

}  // namespace ddpkit::jobs
