#include "tools/common/status.h"

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "autograd/base/error.h"

namespace ddpkit::common {

absl::Status WaitFor(const std::shared_ptr<comm::Work>& work, std::string_view what) {
  absl::Status status = work->Wait();
  if (status.ok()) return status;
  return absl::Status(status.code(), StrCat(what, " failed: ", status.message()));
}

absl::Status RequirePositive(std::string_view flag, double value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(flag, " must be positive, got ", value));
}

absl::Status RequireAtLeast(std::string_view flag, double value, double least) {
  if (value >= least) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(flag, " must be >= ", least, ", got ", value));
}

absl::Status RequireOneOf(std::string_view flag, std::string_view value,
                          std::initializer_list<std::string_view> allowed) {
  for (std::string_view a : allowed) {
    if (value == a) return absl::OkStatus();
  }
  std::vector<std::string> names(allowed.begin(), allowed.end());
  return absl::InvalidArgumentError(
      StrCat(flag, " must be ", absl::StrJoin(names.begin(), names.end() - 1, ", "),
             names.size() > 1 ? " or " : "", names.back(), ", got '", value, "'"));
}

}  // namespace ddpkit::common
