// Whole-file reads and crash-safe writes.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ddpkit {

absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `contents` to a temporary file beside `path`, flushes it to disk, then renames it
// over `path`: a crash leaves either the old file or the new one, never half of either.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

}  // namespace ddpkit
