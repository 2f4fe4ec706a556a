// Checkpoints of a training run that lose nothing: what they hold, how they are committed
// atomically across ranks, and how a reader decides it can trust one (docs/reliability.md).
//
//   DIR/step-00000040/                  one committed checkpoint, named by its step
//       MANIFEST.json                   every other file: name, size, CRC-32 (written last)
//       state.json                      step, data position, the settings a resume must share,
//                                       DDP's rebuilt bucket plan
//       model.safetensors               the state dict (PyTorch's order, buffers included)
//       optimizer.safetensors           optimizer state every rank holds alike (SGD momentum)
//       optimizer.rank-00001.safetensors    ... or each rank's own shard (ZeRO-1)
//   DIR/.tmp-step-00000050-<pid>/       being written; never read, removed by the next resume
//   DIR/damaged-step-00000060/          a damaged checkpoint a resume moved aside
//
// A folder only gets its step-N name (one rename, then an fsync of DIR) once every rank's
// files and the manifest are on disk, so a crash leaves either the complete checkpoint or none.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/nn/nn.h"
#include "autograd/nn/optim.h"
#include "comm/process_group.h"
#include "tools/checkpoint/manifest.h"  // CheckpointManifest, ParseCheckpointManifest

namespace ddpkit::checkpoint {

// ------------------------------------------------------------------ a folder and its manifest

// Reads and parses `folder`'s manifest and checks it names the folder's step.
absl::StatusOr<CheckpointManifest> ReadCheckpointManifest(const std::string& folder);
// The bytes of the file `name` of `folder`, checked against its size and CRC-32 in `manifest`.
absl::StatusOr<std::string> ReadVerifiedFile(const std::string& folder,
                                             const CheckpointManifest& manifest,
                                             std::string_view name);
// ReadCheckpointManifest, then every file it lists through ReadVerifiedFile. DataLoss saying
// what is wrong ("file 'model.safetensors' does not match its CRC-32 ...") otherwise.
absl::StatusOr<CheckpointManifest> VerifyCheckpoint(const std::string& folder);

// ------------------------------------------------------------------- what a checkpoint holds

// Settings a resume must share with the run that wrote the checkpoint, as (flag, value):
// {"--lr", "0.1"}. A difference is refused, naming the flag.
using CheckpointSettings = std::vector<std::pair<std::string, std::string>>;

// DDP's bucket plan after its rebuild (reducer::BucketAssignment's shape): per bucket its
// parameter indices in reduction order, and its byte limit. A resumed run starts from it, so
// its allreduces sum in the uninterrupted run's order (docs/reliability.md "Checkpoints").
struct BucketPlan {
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> limits;
};

// Static graph's record of its first synced backward (reducer::StaticGraphRecord's shape): per
// parameter how often its hook fired, and which parameters no rank used. A run resumed before
// static graph's second backward recorded the arrival order needs it to take the uninterrupted
// run's steps: without it, it counts hooks again and rebuilds one step later.
struct StaticGraphRecord {
  std::vector<size_t> hook_counts;      // by parameter index
  std::vector<size_t> globally_unused;  // parameter indices
};

// What one rank saves and restores: its live model and optimizer.
struct CheckpointSubject {
  nn::Module& model;
  Optimizer& optimizer;
  // true (ZeRO-1): each rank writes and reads its own optimizer state; false: every rank holds
  // the same state, rank 0 writes it and every rank reads it.
  bool sharded_optimizer = false;
  CheckpointSettings settings;
  std::optional<BucketPlan> bucket_plan;  // saved when set (rank 0's); nullopt: not rebuilt yet
  std::optional<StaticGraphRecord> static_graph;  // saved when set (rank 0's)
};

// Where training stands: enough to go on as if it had never stopped.
struct TrainingPosition {
  int64_t step = 0;              // optimizer steps done
  int64_t next_micro_batch = 0;  // the global micro-batch the next step trains on first
};

// ------------------------------------------------------------------ collective save / resume

// --checkpoint-dir, --checkpoint-every, --checkpoint-keep.
struct CheckpointOptions {
  std::string dir;  // empty: no checkpoints
  int every = 10;   // optimizer steps between checkpoints (and one after the last step)
  int keep = 2;     // committed checkpoints kept; older ones are deleted after a commit

  bool enabled() const { return !dir.empty(); }
};

// InvalidArgument naming the flag: every or keep below 1, or a DIR that cannot be created or
// written. Creates DIR.
absl::Status ValidateCheckpointOptions(const CheckpointOptions& options);

// Collective. Every rank writes its part into DIR/.tmp-step-N-<rank 0's pid>/ and fsyncs it;
// once all have (a collective), rank 0 writes the manifest, fsyncs the folder, renames it to
// DIR/step-N, fsyncs DIR and deletes all but the newest `keep` step folders; a last collective
// tells every rank the outcome. Returns the committed folder, or (on every rank) the error,
// naming the rank that failed; nothing that looks committed is left behind.
absl::StatusOr<std::string> SaveCheckpoint(const CheckpointOptions& options,
                                           comm::ProcessGroup& group,
                                           const CheckpointSubject& subject,
                                           const TrainingPosition& position);

struct ResumeOutcome {
  std::optional<TrainingPosition> position;       // nullopt: nothing to resume, start from step 0
  std::string path;                               // the checkpoint restored, when one was
  std::optional<BucketPlan> bucket_plan;          // the checkpoint's, unchecked: outside bytes
  std::optional<StaticGraphRecord> static_graph;  // the checkpoint's, unchecked: outside bytes
  std::vector<std::string> warnings;  // rank 0's: leftovers removed, checkpoints skipped
};

// Collective. Rank 0 removes leftover .tmp folders, verifies DIR's step folders newest first
// (a damaged one is moved aside to DIR/damaged-step-N with a warning) and broadcasts the step
// it chose; every rank then restores the model and its optimizer state from it. A missing or
// empty DIR starts fresh. FailedPrecondition, on every rank, when the checkpoint's settings
// differ from the subject's (naming the flag) or when DIR holds checkpoints but none is usable
// (naming each and what is wrong: starting over would silently throw the run away).
absl::StatusOr<ResumeOutcome> ResumeFromLatestCheckpoint(const std::string& dir,
                                                         comm::ProcessGroup& group,
                                                         const CheckpointSubject& subject);

}  // namespace ddpkit::checkpoint
