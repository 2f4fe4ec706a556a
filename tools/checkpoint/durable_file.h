// The file-system steps a checkpoint commit is built from: files and folders that are on disk
// (fsync'd) before anything points at them, and the CRC-32 that lets a reader trust them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace ddpkit::checkpoint {

// Creates `path` (which must not exist), writes `contents` and fsyncs it.
absl::Status WriteFileDurably(const std::string& path, std::string_view contents);

// fsyncs a folder, so the names created or renamed in it survive a crash.
absl::Status SyncFolder(const std::string& path);

// rename(2) of a folder, then fsync of its parent: the new name is on disk when this returns.
absl::Status RenameDurably(const std::string& from, const std::string& to);

// zlib's CRC-32 (the one gzip and zip use) of `bytes`.
uint32_t Crc32(std::string_view bytes);

}  // namespace ddpkit::checkpoint
