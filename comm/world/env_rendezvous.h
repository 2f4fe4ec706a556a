// env:// rendezvous, as torchrun: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE (required),
// LOCAL_RANK, LOCAL_WORLD_SIZE and DDPKIT_STORE_TOKEN (optional). `ddpkit launch` sets them; in
// a Slurm step started by srun, those unset come from SLURM_* (comm/world/slurm_env.h).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ddpkit::comm {

// Set by `ddpkit launch` for its ranks: the launcher tags every line they write ("[rank N] "),
// so a rank's own log lines leave the rank out rather than say it twice.
inline constexpr char kLauncherTagsLinesEnv[] = "DDPKIT_LAUNCHER_TAGS_LINES";

struct EnvRendezvous {
  std::string master_addr;
  int master_port = 0;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string store_token = {};  // DDPKIT_STORE_TOKEN; empty: rank 0's store admits anyone
  // DDPKIT_LOCAL_ADDR: the address this node's ranks listen on for their peers (Gloo's
  // sockets); empty: 127.0.0.1 when MASTER_ADDR is a loopback address, else the host name.
  // `ddpkit launch --local-addr` sets it (e.g. a second node on 127.0.0.2).
  std::string local_addr = {};
};

// Reads and validates the variables; a missing or malformed one is an InvalidArgument that
// names it and says how to set it.
absl::StatusOr<EnvRendezvous> ReadEnvRendezvous();

}  // namespace ddpkit::comm
