#include "autograd/error.h"

namespace ddpkit {

void ThrowStatus(const absl::Status& status) {
  throw Error(std::string(status.message()), status.code());
}

std::string InternalCheckMessage(std::string_view file, int line, std::string_view message) {
  // The file as the repository names it ("reducer/reducer.cc"): its last two components.
  const size_t last = file.rfind('/');
  if (last != std::string_view::npos && last > 0) {
    const size_t folder = file.rfind('/', last - 1);
    if (folder != std::string_view::npos) file.remove_prefix(folder + 1);
  }
  return StrCat("[ddpkit bug] ", file, ":", line, ": ", message,
                " (an invariant of ddpkit itself broke; please report it)");
}

}  // namespace ddpkit
