// Any bytes in a MANIFEST.json: a manifest or a DataLoss status, never a crash or an exception;
// a manifest it accepts writes back and reads back the same.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tools/checkpoint/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ddpkit::checkpoint::CheckpointManifest> manifest =
      ddpkit::checkpoint::ParseCheckpointManifest(bytes);
  if (!manifest.ok()) return 0;
  absl::StatusOr<ddpkit::checkpoint::CheckpointManifest> again =
      ddpkit::checkpoint::ParseCheckpointManifest(
          ddpkit::checkpoint::SerializeCheckpointManifest(*manifest));
  if (!again.ok() || again->step != manifest->step ||
      again->files.size() != manifest->files.size()) {
    std::abort();
  }
  for (size_t i = 0; i < manifest->files.size(); ++i) {
    const auto& a = manifest->files[i];
    const auto& b = again->files[i];
    if (a.name != b.name || a.size != b.size || a.crc32 != b.crc32) std::abort();
  }
  return 0;
}
