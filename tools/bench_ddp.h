// `ddpkit bench ddp` (bench_ddp.cc), run on every rank by `ddpkit bench`.
#pragma once

#include "absl/status/status.h"
#include "comm/process_group.h"

namespace ddpkit::cli {

absl::Status BenchDdp(comm::ProcessGroup& group);

}  // namespace ddpkit::cli
