#include "autograd/base/error.h"

#include <algorithm>

namespace ddpkit {

void ThrowStatus(const absl::Status& status) {
  throw Error(std::string(status.message()), status.code());
}

namespace {

// The file as the repository names it ("autograd/base/error.cc"): from its first folder that is
// one of the repository's top-level ones (the build passes "../reducer/reducer.cc", or a path
// from /); the name as given when none is.
std::string_view RepositoryPath(std::string_view file) {
  size_t first = std::string_view::npos;
  for (std::string_view top : {"autograd/", "comm/", "join/", "reducer/", "tools/", "tests/"}) {
    for (size_t at = file.find(top); at != std::string_view::npos; at = file.find(top, at + 1)) {
      if (at == 0 || file[at - 1] == '/') {
        first = std::min(first, at);
        break;
      }
    }
  }
  return first == std::string_view::npos ? file : file.substr(first);
}

}  // namespace

std::string InternalCheckMessage(std::string_view file, int line, std::string_view message) {
  return StrCat("[ddpkit bug] ", RepositoryPath(file), ":", line, ": ", message,
                " (an invariant of ddpkit itself broke; please report it)");
}

}  // namespace ddpkit
