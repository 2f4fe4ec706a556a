// The manifest of a checkpoint folder (checkpoint.h): which files it holds, with their sizes
// and CRC-32s. Pure and total, so a fuzzer needs only this header, manifest.cc, Abseil and
// nlohmann_json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ddpkit::checkpoint {

inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr char kManifestFileName[] = "MANIFEST.json";
inline constexpr char kStateFileName[] = "state.json";
inline constexpr char kModelFileName[] = "model.safetensors";

// ------------------------------------------------------------------------------ the manifest

struct CheckpointFile {
  std::string name;  // a plain file name inside the checkpoint folder
  uint64_t size = 0;
  uint32_t crc32 = 0;  // zlib's CRC-32 of the whole file
};

struct CheckpointManifest {
  int64_t step = 0;
  std::vector<CheckpointFile> files;

  const CheckpointFile* Find(std::string_view name) const;
};

// {"format": "ddpkit-checkpoint", "version": 1, "step": 40,
//  "files": [{"name": "state.json", "size": 312, "crc32": 2874013215}, ...]}
// Total over all inputs: any bytes give a manifest or a DataLoss error saying what is wrong,
// never a crash or an exception. File names must be plain names (no '/', not "." or ".."),
// unique, and the manifest may not list itself.
absl::StatusOr<CheckpointManifest> ParseCheckpointManifest(std::string_view bytes);
std::string SerializeCheckpointManifest(const CheckpointManifest& manifest);

// "step-00000040", and back (nullopt for any other name).
std::string CheckpointFolderName(int64_t step);
std::optional<int64_t> StepOfCheckpointFolder(std::string_view name);

}  // namespace ddpkit::checkpoint
