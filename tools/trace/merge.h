// `ddpkit trace merge`: the per-rank files of a multi-process job (FILE.rank<r>.json) as one
// trace. Their clocks were aligned to rank 0's when they were recorded (clock_sync.h), so
// merging checks that the files belong together — one job id, one world size, each rank once,
// every rank present — and concatenates.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddpkit::trace {

// The files of `base` ("t.json" -> t.rank0.json, t.rank1.json, ...), in rank order, as many as
// exist from rank 0 up.
std::vector<std::string> RankFilesOf(const std::string& base);

// Merges `inputs` into `output` (written atomically). Returns the number of ranks merged.
absl::StatusOr<int> MergeTraceFiles(const std::vector<std::string>& inputs,
                                    const std::string& output);

}  // namespace ddpkit::trace
