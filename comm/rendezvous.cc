#include "comm/rendezvous.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "autograd/log.h"
#include "comm/gloo/process_group_gloo.h"

namespace ddpkit::comm {
namespace {

absl::StatusOr<std::string> Required(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    return absl::InvalidArgumentError(
        StrCat("env:// rendezvous: environment variable ", name,
               " expected, but not set; run under "
               "`ddpkit launch` (which sets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), or use "
               "--backend threads"));
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
  if (const char* v = std::getenv("LOCAL_WORLD_SIZE")) {
    DDPKIT_ASSIGN_OR_RETURN(env.local_world_size,
                            Integer("LOCAL_WORLD_SIZE", v, 1, env.world_size));
  }
  if (const char* v = std::getenv("LOCAL_RANK")) {
    DDPKIT_ASSIGN_OR_RETURN(env.local_rank, Integer("LOCAL_RANK", v, 0, env.local_world_size - 1));
  }
  return env;
}

absl::StatusOr<std::unique_ptr<DistributedWorld>> DistributedWorld::InitGloo(
    const EnvRendezvous& env, ProcessGroupOptions options) {
  std::unique_ptr<DistributedWorld> world(new DistributedWorld());
  world->world_size_ = env.world_size;
  world->timeout_ = options.timeout;
  if (env.rank == 0) {
    DDPKIT_ASSIGN_OR_RETURN(world->server_,
                            TcpStoreServer::Start(env.master_addr, env.master_port));
  }
  DDPKIT_ASSIGN_OR_RETURN(world->store_,
                          TcpStore::Connect(env.master_addr, env.master_port, options.timeout));
  // Gloo listens on the address peers reach this host by: loopback for a local job.
  const bool local = env.master_addr == "localhost" || absl::StartsWith(env.master_addr, "127.");
  char host[256] = "localhost";
  if (!local) ::gethostname(host, sizeof(host));
  DDPKIT_ASSIGN_OR_RETURN(world->group_,
                          CreateGlooProcessGroup(env.rank, env.world_size, world->store_,
                                                 local ? "127.0.0.1" : host, options));
  return world;
}

DistributedWorld::~DistributedWorld() {
  group_.reset();
  if (!store_) return;
  // Everyone checks out; rank 0 keeps serving the store until all have (or the timeout).
  if (store_->Add("ddpkit/exited", 1).ok() && server_) {
    const absl::Time deadline = absl::Now() + timeout_;
    while (absl::Now() < deadline) {
      absl::StatusOr<int64_t> exited = store_->Add("ddpkit/exited", 0);
      if (!exited.ok() || *exited >= world_size_) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  store_.reset();
  server_.reset();
}

}  // namespace ddpkit::comm
