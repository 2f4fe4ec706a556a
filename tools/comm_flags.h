// The flags every communicating subcommand shares (--backend, --world-size, --timeout), and
// running a per-rank function on the world they describe.
#pragma once

#include <functional>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "comm/process_group.h"

ABSL_DECLARE_FLAG(std::string, backend);
ABSL_DECLARE_FLAG(int32_t, world_size);
ABSL_DECLARE_FLAG(double, timeout);

namespace ddpkit::cli {

struct CommSetup {
  std::string backend;  // "threads" or "gloo"
  int world_size = 1;   // threads only; gloo takes WORLD_SIZE from the launcher
  comm::ProcessGroupOptions options;
};

absl::StatusOr<CommSetup> CommSetupFromFlags();

// threads: runs `body` on world_size rank threads of this process. gloo: joins the env://
// world (`ddpkit launch` sets it up) and runs `body` once, as this process's rank.
absl::Status RunOnWorld(const CommSetup& setup,
                        const std::function<absl::Status(comm::ProcessGroup&)>& body);

}  // namespace ddpkit::cli
