#include "tools/checkpoint/durable_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "autograd/base/error.h"

namespace ddpkit::checkpoint {
namespace {

absl::Status ErrnoError(std::string_view what, const std::string& path) {
  return absl::UnavailableError(StrCat("cannot ", what, " '", path, "': ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, std::string_view contents, const std::string& path) {
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("write", path);
    written += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFileDurably(const std::string& path, std::string_view contents) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create", path);
  absl::Status status = WriteAll(fd, contents, path);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoError("fsync", path);
  if (::close(fd) != 0 && status.ok()) status = ErrnoError("close", path);
  return status;
}

absl::Status SyncFolder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open the folder", path);
  absl::Status status = ::fsync(fd) == 0 ? absl::OkStatus() : ErrnoError("fsync the folder", path);
  ::close(fd);
  return status;
}

absl::Status RenameDurably(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return absl::UnavailableError(
        StrCat("cannot rename '", from, "' to '", to, "': ", std::strerror(errno)));
  }
  const std::string parent = std::filesystem::path(to).parent_path().string();
  return SyncFolder(parent.empty() ? "." : parent);
}

uint32_t Crc32(std::string_view bytes) {
  return static_cast<uint32_t>(
      ::crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

}  // namespace ddpkit::checkpoint
