// Checking a checkpoint folder against its manifest: the step it names, each file's size and
// CRC-32.
#include <filesystem>

#include "autograd/base/error.h"
#include "autograd/base/file_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/durable_file.h"

namespace ddpkit::checkpoint {

absl::StatusOr<CheckpointManifest> ReadCheckpointManifest(const std::string& folder) {
  absl::StatusOr<std::string> bytes = ReadFileToString(StrCat(folder, "/", kManifestFileName));
  if (!bytes.ok()) return absl::DataLossError(StrCat("no readable ", kManifestFileName));
  DDPKIT_ASSIGN_OR_RETURN(CheckpointManifest manifest, ParseCheckpointManifest(*bytes));
  const std::optional<int64_t> step =
      StepOfCheckpointFolder(std::filesystem::path(folder).filename().string());
  if (step != manifest.step) {
    return absl::DataLossError(
        StrCat("the manifest is for step ", manifest.step, ", not this folder's"));
  }
  return manifest;
}

absl::StatusOr<std::string> ReadVerifiedFile(const std::string& folder,
                                             const CheckpointManifest& manifest,
                                             std::string_view name) {
  const CheckpointFile* file = manifest.Find(name);
  if (file == nullptr)
    return absl::DataLossError(StrCat("the manifest does not list '", name, "'"));
  absl::StatusOr<std::string> contents = ReadFileToString(StrCat(folder, "/", name));
  if (!contents.ok()) return absl::DataLossError(StrCat("file '", name, "' is missing"));
  if (contents->size() != file->size) {
    return absl::DataLossError(StrCat("file '", name, "' has ", contents->size(),
                                      " bytes, the manifest says ", file->size, " (truncated?)"));
  }
  if (Crc32(*contents) != file->crc32) {
    return absl::DataLossError(
        StrCat("file '", name, "' does not match its CRC-32 in the manifest (damaged)"));
  }
  return contents;
}

absl::StatusOr<CheckpointManifest> VerifyCheckpoint(const std::string& folder) {
  DDPKIT_ASSIGN_OR_RETURN(CheckpointManifest manifest, ReadCheckpointManifest(folder));
  for (const CheckpointFile& file : manifest.files) {
    DDPKIT_RETURN_IF_ERROR(ReadVerifiedFile(folder, manifest, file.name).status());
  }
  return manifest;
}

}  // namespace ddpkit::checkpoint
