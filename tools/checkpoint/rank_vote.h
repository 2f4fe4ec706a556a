// How the ranks of a checkpoint save or resume agree on an outcome, so that either every rank
// goes on or every rank stops with an error (none is left waiting in a later collective).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "comm/process_group.h"

namespace ddpkit::checkpoint {

// Collective: every rank passes its own outcome of `phase` and gets back OK when all succeeded;
// otherwise its own error, or (a rank that succeeded) one naming the ranks that failed.
absl::Status AgreeOnOutcome(comm::ProcessGroup& group, const absl::Status& mine,
                            std::string_view phase);

// Collective: rank 0's `values` on every rank (others pass any vector of the same length).
absl::StatusOr<std::vector<int64_t>> BroadcastFromRankZero(comm::ProcessGroup& group,
                                                           std::vector<int64_t> values,
                                                           std::string_view what);

}  // namespace ddpkit::checkpoint
