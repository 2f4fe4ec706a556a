// What static graph learns in its first synced backward, in a form a checkpoint can keep: how
// often each parameter's hook fired, and which parameters no rank used. A run resumed after that
// backward adopts it (Reducer::AdoptStaticGraphRecord) instead of counting hooks again, so its
// steps are the uninterrupted run's: hooks reduce bucket by bucket from its first step, and the
// rebuild comes when the uninterrupted run's did (docs/reliability.md "Checkpoints").
#pragma once

#include <cstddef>
#include <vector>

#include "absl/status/status.h"

namespace ddpkit::reducer {

struct StaticGraphRecord {
  std::vector<size_t> hook_counts;      // by parameter index: firings in one backward
  std::vector<size_t> globally_unused;  // parameter indices no rank used, ascending
};

// The most hook firings per parameter a record may hold (the reducer counts in an int).
inline constexpr size_t kMaxHookCount = 1 << 20;

// InvalidArgument unless `record` fits a model of `num_params` parameters: one hook count per
// parameter, each at most kMaxHookCount; globally unused indices ascending, each below
// `num_params`. For a record from outside bytes (a checkpoint's); says what is wrong.
absl::Status CheckStaticGraphRecord(size_t num_params, const StaticGraphRecord& record);

}  // namespace ddpkit::reducer
