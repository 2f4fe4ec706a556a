// The flags every communicating subcommand shares: --backend, --world-size, --timeout.
#pragma once

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "comm/world/world.h"

ABSL_DECLARE_FLAG(std::string, backend);
ABSL_DECLARE_FLAG(int32_t, world_size);
ABSL_DECLARE_FLAG(double, timeout);
ABSL_DECLARE_FLAG(int32_t, round_robin_groups);

namespace ddpkit::cli {

// Flag names (Abseil spelling) a subcommand lists to accept them.
inline const std::vector<std::string> kCommFlagNames = {"backend", "world_size", "timeout",
                                                        "threads_per_rank", "round_robin_groups"};

// Sets a job's world: backend, world size, timeout, threads; InvalidArgument naming the flag.
absl::Status WorldFromFlags(comm::WorldSpec& world);

}  // namespace ddpkit::cli
