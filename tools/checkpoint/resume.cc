// ResumeFromLatestCheckpoint: rank 0 chooses the newest checkpoint that verifies, every rank
// restores its part of it, and the ranks agree before training goes on.
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "autograd/base/error.h"
#include "autograd/nn/safetensors.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/rank_vote.h"
#include "tools/checkpoint/state_file.h"

namespace ddpkit::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kFresh = -1, kRefused = -2;

// Removes what an interrupted save left: .tmp-* folders (never committed, never read).
void RemoveLeftovers(const std::string& dir, std::vector<std::string>& warnings) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (!absl::StartsWith(entry.path().filename().string(), ".tmp-")) continue;
    fs::remove_all(entry.path(), ec);
    warnings.push_back(StrCat("removed ", entry.path().string(),
                              ", left by a checkpoint that was never committed"));
  }
}

// The step folders of `dir`, newest first.
std::vector<std::pair<int64_t, std::string>> StepFolders(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> steps;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::optional<int64_t> step = StepOfCheckpointFolder(entry.path().filename().string());
    if (step && entry.is_directory(ec)) steps.emplace_back(*step, entry.path().string());
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

// A complete, intact checkpoint: its manifest verifies, its state parses, and every file a
// checkpoint of that state needs is listed.
absl::Status CheckUsable(const std::string& folder) {
  DDPKIT_ASSIGN_OR_RETURN(const CheckpointManifest manifest, VerifyCheckpoint(folder));
  DDPKIT_ASSIGN_OR_RETURN(const std::string bytes,
                          ReadVerifiedFile(folder, manifest, kStateFileName));
  DDPKIT_ASSIGN_OR_RETURN(const CheckpointState state, ParseCheckpointState(bytes));
  if (state.position.step != manifest.step) {
    return absl::DataLossError(StrCat(kStateFileName, " is for step ", state.position.step));
  }
  for (const std::string& name : RequiredCheckpointFiles(state)) {
    if (manifest.Find(name) == nullptr) {
      return absl::DataLossError(StrCat("the manifest does not list '", name, "'"));
    }
  }
  return absl::OkStatus();
}

// Moves a damaged checkpoint out of the step-N names (so a later commit of step N does not
// collide with it) without deleting what a person may want to inspect.
std::string MoveAside(const std::string& dir, int64_t step) {
  std::string aside = StrCat(dir, "/damaged-", CheckpointFolderName(step));
  std::error_code ec;
  if (fs::exists(aside, ec)) aside = StrCat(aside, "-", ::getpid());
  fs::rename(StrCat(dir, "/", CheckpointFolderName(step)), aside, ec);
  return ec ? std::string() : aside;
}

// Rank 0: the step to resume from (kFresh when DIR holds no checkpoint), or the error when it
// holds checkpoints but none is usable.
absl::StatusOr<int64_t> ChooseCheckpoint(const std::string& dir,
                                         std::vector<std::string>& warnings) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return kFresh;
  RemoveLeftovers(dir, warnings);
  std::vector<std::string> damaged;  // "<folder>: <what is wrong>"
  std::vector<int64_t> damaged_steps;
  for (const auto& [step, folder] : StepFolders(dir)) {
    const absl::Status usable = CheckUsable(folder);
    if (!usable.ok()) {
      damaged.push_back(StrCat(folder, ": ", usable.message()));
      damaged_steps.push_back(step);
      continue;
    }
    for (size_t i = 0; i < damaged.size(); ++i) {
      const std::string aside = MoveAside(dir, damaged_steps[i]);
      warnings.push_back(StrCat("checkpoint ", damaged[i], "; ",
                                aside.empty() ? "left in place" : "moved to " + aside,
                                ", falling back to ", folder));
    }
    return step;
  }
  if (damaged.empty()) return kFresh;
  return absl::FailedPreconditionError(
      StrCat("no usable checkpoint in ", dir, ": ", absl::StrJoin(damaged, "; "),
             ". Starting over would discard the run: move these folders aside (or pass another "
             "--checkpoint-dir) to start from step 0"));
}

// Every rank: its part of the checkpoint at `folder`, checked against the manifest, into the
// live model and optimizer. Returns the checkpoint's state.
absl::StatusOr<CheckpointState> Restore(const std::string& folder, comm::ProcessGroup& group,
                                        const CheckpointSubject& subject) {
  DDPKIT_ASSIGN_OR_RETURN(const CheckpointManifest manifest, ReadCheckpointManifest(folder));
  DDPKIT_ASSIGN_OR_RETURN(const std::string state_bytes,
                          ReadVerifiedFile(folder, manifest, kStateFileName));
  DDPKIT_ASSIGN_OR_RETURN(const CheckpointState state, ParseCheckpointState(state_bytes));
  DDPKIT_RETURN_IF_ERROR(CheckSameSettings(state.settings, subject.settings, folder));
  if (state.world_size != group.size() || state.sharded_optimizer != subject.sharded_optimizer) {
    return absl::FailedPreconditionError(
        StrCat("cannot resume from ", folder, ": it was written by ", state.world_size,
               " ranks with a ", state.sharded_optimizer ? "sharded" : "replicated",
               " optimizer; use the same world size and --optimizer"));
  }
  DDPKIT_RETURN_IF_ERROR(ReadVerifiedFile(folder, manifest, kModelFileName).status());
  DDPKIT_RETURN_IF_ERROR(LoadStateDict(subject.model, StrCat(folder, "/", kModelFileName)));
  const std::string optimizer_name = OptimizerFileName(subject.sharded_optimizer, group.rank());
  DDPKIT_ASSIGN_OR_RETURN(const std::string optimizer_bytes,
                          ReadVerifiedFile(folder, manifest, optimizer_name));
  DDPKIT_ASSIGN_OR_RETURN(const SafetensorsFile optimizer,
                          ParseSafetensors(optimizer_bytes, StrCat(folder, "/", optimizer_name)));
  DDPKIT_RETURN_IF_ERROR(subject.optimizer.LoadStateTensors(optimizer.tensors));
  return state;
}

}  // namespace

absl::StatusOr<ResumeOutcome> ResumeFromLatestCheckpoint(const std::string& dir,
                                                         comm::ProcessGroup& group,
                                                         const CheckpointSubject& subject) {
  ResumeOutcome outcome;
  absl::StatusOr<int64_t> chosen = kFresh;
  if (group.rank() == 0) chosen = ChooseCheckpoint(dir, outcome.warnings);
  DDPKIT_ASSIGN_OR_RETURN(
      const std::vector<int64_t> agreed,
      BroadcastFromRankZero(group, {chosen.ok() ? *chosen : kRefused}, "choosing a checkpoint"));
  if (!chosen.ok()) return chosen.status();
  if (agreed[0] == kRefused) {
    return absl::FailedPreconditionError(
        StrCat("rank 0 found no usable checkpoint in ", dir, " (its error says why)"));
  }
  if (agreed[0] == kFresh) return outcome;
  outcome.path = StrCat(dir, "/", CheckpointFolderName(agreed[0]));
  absl::StatusOr<CheckpointState> state = Restore(outcome.path, group, subject);
  DDPKIT_RETURN_IF_ERROR(AgreeOnOutcome(group, state.status(), "restoring the checkpoint"));
  outcome.position = state->position;
  outcome.bucket_plan = std::move(state->bucket_plan);
  outcome.static_graph = std::move(state->static_graph);
  return outcome;
}

}  // namespace ddpkit::checkpoint
