#include "reducer/static_graph_record.h"

#include "autograd/base/error.h"

namespace ddpkit::reducer {

absl::Status CheckStaticGraphRecord(size_t num_params, const StaticGraphRecord& record) {
  if (record.hook_counts.size() != num_params) {
    return absl::InvalidArgumentError(StrCat("the record has ", record.hook_counts.size(),
                                             " hook counts for ", num_params, " parameters"));
  }
  for (size_t i = 0; i < num_params; ++i) {
    if (record.hook_counts[i] > kMaxHookCount) {
      return absl::InvalidArgumentError(StrCat("parameter ", i, "'s hook count ",
                                               record.hook_counts[i], " is over ", kMaxHookCount));
    }
  }
  for (size_t k = 0; k < record.globally_unused.size(); ++k) {
    const size_t index = record.globally_unused[k];
    if (index >= num_params) {
      return absl::InvalidArgumentError(
          StrCat("unused parameter ", index, " is not below ", num_params));
    }
    if (k > 0 && index <= record.globally_unused[k - 1]) {
      return absl::InvalidArgumentError(
          StrCat("the unused parameters are not ascending at ", index));
    }
  }
  return absl::OkStatus();
}

}  // namespace ddpkit::reducer
