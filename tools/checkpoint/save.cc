// SaveCheckpoint: every rank writes its part into one temporary folder; rank 0 commits it with
// a rename once all parts are on disk; the ranks agree on the outcome before going on.
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_format.h"
#include "autograd/base/error.h"
#include "autograd/nn/safetensors.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/durable_file.h"
#include "tools/checkpoint/rank_vote.h"
#include "tools/checkpoint/state_file.h"
#include "tools/common/status.h"

namespace ddpkit::checkpoint {
namespace {

namespace fs = std::filesystem;

// The files one rank writes, serialized.
std::vector<std::pair<std::string, std::string>> RankFiles(const CheckpointSubject& subject,
                                                           const CheckpointState& state, int rank) {
  std::vector<std::pair<std::string, std::string>> files;
  if (rank == 0) {
    files.emplace_back(kStateFileName, SerializeCheckpointState(state));
    // The file --save-weights writes: PyTorch's state_dict, buffers included.
    files.emplace_back(kModelFileName,
                       SerializeSafetensors(subject.model.StateDict(), {{"format", "pt"}}));
  }
  if (rank == 0 || subject.sharded_optimizer) {
    files.emplace_back(OptimizerFileName(subject.sharded_optimizer, rank),
                       SerializeSafetensors(subject.optimizer.StateTensors(), {{"format", "pt"}}));
  }
  return files;
}

// Rank 0 makes DIR/.tmp-step-N-<pid>; every rank learns its name (or that it failed).
absl::StatusOr<std::string> MakeTemporaryFolder(const std::string& dir, int64_t step,
                                                comm::ProcessGroup& group) {
  absl::Status made = absl::OkStatus();
  int64_t pid = ::getpid();
  if (group.rank() == 0) {
    const std::string tmp = absl::StrFormat("%s/.tmp-%s-%d", dir, CheckpointFolderName(step), pid);
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) {
      made = absl::UnavailableError(
          StrCat("cannot create the checkpoint folder '", tmp, "': ", ec.message()));
    }
  }
  DDPKIT_RETURN_IF_ERROR(AgreeOnOutcome(group, made, "creating the checkpoint folder"));
  DDPKIT_ASSIGN_OR_RETURN(std::vector<int64_t> agreed,
                          BroadcastFromRankZero(group, {pid}, "sharing the checkpoint folder"));
  return absl::StrFormat("%s/.tmp-%s-%d", dir, CheckpointFolderName(step), agreed[0]);
}

// Writes this rank's files and shares every rank's (size, CRC-32) with all: the manifest
// records what each rank meant to write, not what rank 0 reads back.
absl::StatusOr<std::vector<CheckpointFile>> WriteParts(const std::string& tmp,
                                                       comm::ProcessGroup& group,
                                                       const CheckpointSubject& subject,
                                                       const CheckpointState& state) {
  std::vector<CheckpointFile> mine;
  absl::Status written = absl::OkStatus();
  for (const auto& [name, bytes] : RankFiles(subject, state, group.rank())) {
    mine.push_back({.name = name, .size = bytes.size(), .crc32 = Crc32(bytes)});
    if (written.ok()) written = WriteFileDurably(StrCat(tmp, "/", name), bytes);
  }
  if (!written.ok()) {
    written = absl::Status(written.code(), StrCat("rank ", group.rank(), ": ", written.message()));
  }
  DDPKIT_RETURN_IF_ERROR(AgreeOnOutcome(group, written, "writing the checkpoint"));
  if (!subject.sharded_optimizer) return mine;  // rank 0's are all there are
  // Each rank r > 0 wrote one shard: its (size, crc) at [2r, 2r + 1].
  std::vector<int64_t> sizes(2 * group.size(), 0);
  if (group.rank() > 0) {
    sizes[2 * group.rank()] = static_cast<int64_t>(mine[0].size);
    sizes[2 * group.rank() + 1] = mine[0].crc32;
  }
  Tensor t = Tensor::FromVector<int64_t>(absl::MakeConstSpan(sizes), {2 * group.size()});
  DDPKIT_RETURN_IF_ERROR(common::WaitFor(group.Allreduce(t), "sharing the checkpoint's checksums"));
  for (int r = 1; r < group.size() && group.rank() == 0; ++r) {
    mine.push_back({.name = OptimizerFileName(true, r),
                    .size = static_cast<uint64_t>(t.data<int64_t>()[2 * r]),
                    .crc32 = static_cast<uint32_t>(t.data<int64_t>()[2 * r + 1])});
  }
  return mine;
}

// Deletes all but the newest `keep` committed step folders of `dir`. Best effort: a folder that
// cannot be deleted now is deleted by a later commit.
void Prune(const std::string& dir, int keep) {
  std::vector<std::pair<int64_t, fs::path>> steps;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::optional<int64_t> step = StepOfCheckpointFolder(entry.path().filename().string());
    if (step) steps.emplace_back(*step, entry.path());
  }
  std::sort(steps.rbegin(), steps.rend());
  for (size_t i = std::max(keep, 1); i < steps.size(); ++i) fs::remove_all(steps[i].second, ec);
}

// Rank 0: the manifest, then the rename that makes the checkpoint exist. A folder already
// named step-N (a damaged one from an abandoned run) is moved aside first and deleted after.
absl::Status Commit(const std::string& tmp, const std::string& final_path,
                    const CheckpointManifest& manifest) {
  DDPKIT_RETURN_IF_ERROR(
      WriteFileDurably(StrCat(tmp, "/", kManifestFileName), SerializeCheckpointManifest(manifest)));
  DDPKIT_RETURN_IF_ERROR(SyncFolder(tmp));
  std::error_code ec;
  const std::string replaced = StrCat(tmp, ".replaced");
  const bool exists = fs::exists(final_path, ec);
  if (exists) DDPKIT_RETURN_IF_ERROR(RenameDurably(final_path, replaced));
  DDPKIT_RETURN_IF_ERROR(RenameDurably(tmp, final_path));
  if (exists) fs::remove_all(replaced, ec);
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateCheckpointOptions(const CheckpointOptions& options) {
  if (!options.enabled()) return absl::OkStatus();
  DDPKIT_RETURN_IF_ERROR(common::RequireAtLeast("--checkpoint-every", options.every, 1));
  DDPKIT_RETURN_IF_ERROR(common::RequireAtLeast("--checkpoint-keep", options.keep, 1));
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec || ::access(options.dir.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(
        StrCat("--checkpoint-dir '", options.dir, "' is not a writable folder",
               ec ? StrCat(": ", ec.message()) : std::string(), "; pick one this user can write"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SaveCheckpoint(const CheckpointOptions& options,
                                           comm::ProcessGroup& group,
                                           const CheckpointSubject& subject,
                                           const TrainingPosition& position) {
  const CheckpointState state{.position = position,
                              .world_size = group.size(),
                              .sharded_optimizer = subject.sharded_optimizer,
                              .settings = subject.settings,
                              .bucket_plan = subject.bucket_plan,
                              .static_graph = subject.static_graph};
  DDPKIT_ASSIGN_OR_RETURN(const std::string tmp,
                          MakeTemporaryFolder(options.dir, position.step, group));
  absl::StatusOr<std::vector<CheckpointFile>> files = WriteParts(tmp, group, subject, state);
  const std::string final_path = StrCat(options.dir, "/", CheckpointFolderName(position.step));
  absl::Status committed = files.status();
  if (group.rank() == 0) {
    if (committed.ok()) {
      committed = Commit(tmp, final_path, {.step = position.step, .files = *std::move(files)});
    }
    std::error_code ec;
    if (!committed.ok()) fs::remove_all(tmp, ec);  // never left to look like a checkpoint
    if (committed.ok()) Prune(options.dir, options.keep);
  }
  if (!files.ok()) return files.status();  // every rank already agreed it failed
  DDPKIT_RETURN_IF_ERROR(AgreeOnOutcome(group, committed, "committing the checkpoint"));
  return final_path;
}

}  // namespace ddpkit::checkpoint
