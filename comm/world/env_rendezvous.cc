#include "comm/world/env_rendezvous.h"

#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "autograd/base/error.h"
#include "comm/store/token.h"
#include "comm/world/slurm_env.h"

namespace ddpkit::comm {
namespace {

// A variable from the environment, else from Slurm's (comm/world/slurm_env.h); null when neither
// has it.
const char* Lookup(const char* name) {
  static const std::map<std::string, std::string> slurm = TorchrunVariablesFromSlurm();
  const char* value = std::getenv(name);
  if (value != nullptr && *value != '\0') return value;
  auto it = slurm.find(name);
  return it == slurm.end() ? nullptr : it->second.c_str();
}

absl::StatusOr<std::string> Required(const char* name) {
  const char* value = Lookup(name);
  if (value == nullptr) {
    return absl::InvalidArgumentError(
        StrCat("env:// rendezvous: environment variable ", name,
               " expected, but not set; run under "
               "`ddpkit launch` (which sets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) or srun, "
               "or use --backend threads"));
  }
  return std::string(value);
}

absl::StatusOr<int> Integer(const char* name, const std::string& text, int low, int high) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < low || value > high) {
    return absl::InvalidArgumentError(StrCat("env:// rendezvous: ", name, "='", text,
                                             "' is not an integer in [", low, ", ", high, "]"));
  }
  return value;
}

}  // namespace

absl::StatusOr<EnvRendezvous> ReadEnvRendezvous() {
  EnvRendezvous env;
  DDPKIT_ASSIGN_OR_RETURN(env.master_addr, Required("MASTER_ADDR"));
  DDPKIT_ASSIGN_OR_RETURN(std::string port, Required("MASTER_PORT"));
  DDPKIT_ASSIGN_OR_RETURN(env.master_port, Integer("MASTER_PORT", port, 1, 65535));
  DDPKIT_ASSIGN_OR_RETURN(std::string world, Required("WORLD_SIZE"));
  DDPKIT_ASSIGN_OR_RETURN(env.world_size, Integer("WORLD_SIZE", world, 1, 1 << 20));
  DDPKIT_ASSIGN_OR_RETURN(std::string rank, Required("RANK"));
  DDPKIT_ASSIGN_OR_RETURN(env.rank, Integer("RANK", rank, 0, env.world_size - 1));
  if (const char* v = Lookup("LOCAL_WORLD_SIZE")) {
    DDPKIT_ASSIGN_OR_RETURN(env.local_world_size,
                            Integer("LOCAL_WORLD_SIZE", v, 1, env.world_size));
  }
  if (const char* v = Lookup("LOCAL_RANK")) {
    DDPKIT_ASSIGN_OR_RETURN(env.local_rank, Integer("LOCAL_RANK", v, 0, env.local_world_size - 1));
  }
  if (const char* v = std::getenv(kStoreTokenEnv)) env.store_token = v;
  if (const char* v = std::getenv("DDPKIT_LOCAL_ADDR")) env.local_addr = v;
  return env;
}

}  // namespace ddpkit::comm
