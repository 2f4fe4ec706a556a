#include "autograd/base/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "autograd/base/error.h"

namespace ddpkit {
namespace {

absl::Status ErrnoError(std::string_view what, const std::string& path) {
  return absl::UnavailableError(StrCat(what, " '", path, "': ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(StrCat("cannot open '", path, "': ", std::strerror(errno)));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return ErrnoError("cannot read", path);
  return std::move(contents).str();
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  const std::string temp = StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", temp);
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status status = ErrnoError("cannot write", temp);
      ::close(fd);
      ::unlink(temp.c_str());
      return status;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    absl::Status status = ErrnoError("cannot flush", temp);
    ::unlink(temp.c_str());
    return status;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    absl::Status status = ErrnoError("cannot rename the temporary file onto", path);
    ::unlink(temp.c_str());
    return status;
  }
  return absl::OkStatus();
}

}  // namespace ddpkit
