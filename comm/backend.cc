#include "comm/backend.h"

#include <iterator>

#include "autograd/base/error.h"

namespace ddpkit::comm {
namespace {

// The table is indexed by the enum: each row must sit at its own value.
constexpr bool RowsInEnumOrder() {
  for (int i = 0; i < static_cast<int>(std::size(kBackends)); ++i) {
    if (static_cast<int>(kBackends[i].backend) != i) return false;
  }
  return true;
}
static_assert(RowsInEnumOrder());

// "a, b, c or d", each entry written by `part`.
template <typename Part>
std::string JoinRows(Part part) {
  std::string out;
  const size_t n = std::size(kBackends);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += i + 1 == n ? " or " : ", ";
    out += part(kBackends[i]);
  }
  return out;
}

}  // namespace

absl::StatusOr<Backend> ParseBackend(std::string_view name) {
  for (const BackendInfo& info : kBackends) {
    if (info.name == name) return info.backend;
  }
  return absl::InvalidArgumentError(
      StrCat("--backend must be ", BackendList(), ", got '", name, "'"));
}

std::string BackendList() {
  return JoinRows([](const BackendInfo& info) { return std::string(info.name); });
}

std::string BackendHelp() {
  return JoinRows(
      [](const BackendInfo& info) { return StrCat(info.name, " (", info.description, ")"); });
}

}  // namespace ddpkit::comm
