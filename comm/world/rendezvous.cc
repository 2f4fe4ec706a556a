#include "comm/world/rendezvous.h"

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "comm/gloo/process_group_gloo.h"
#include "comm/nccl/process_group_nccl.h"
#include "comm/round_robin.h"
#include "comm/store/prefix_store.h"

namespace ddpkit::comm {
namespace {

// How long rank 0 keeps the store up for its peers' check-out after a failure.
constexpr absl::Duration kCheckOutAfterFailure = absl::Milliseconds(500);

// The ranks that have not checked in at the rendezvous (empty when the store cannot say).
std::vector<int> MissingRanks(Store& store, int world_size, absl::Duration reply_timeout) {
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    absl::StatusOr<bool> there = store.Check({DistributedWorld::ArrivedKey(r)}, reply_timeout);
    if (!there.ok()) return {};
    if (!*there) missing.push_back(r);
  }
  return missing;
}

// A failed rendezvous, with the ranks that never arrived named where the store can tell.
absl::Status RendezvousFailure(const absl::Status& status, Store& store, int world_size,
                               absl::Duration reply_timeout) {
  std::vector<int> missing = MissingRanks(store, world_size, reply_timeout);
  if (missing.empty()) return status;
  return absl::Status(status.code(),
                      StrCat(status.message(), "; rank", missing.size() > 1 ? "s " : " ",
                             absl::StrJoin(missing, ", "),
                             " did not arrive at the rendezvous (dead, stuck, or not started)"));
}

// One gloo group, or a round-robin composite over `groups` of them (group i > 0 under "rrI/").
absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateGlooGroups(const EnvRendezvous& env,
                                                               const std::shared_ptr<Store>& store,
                                                               const std::string& listen,
                                                               const ProcessGroupOptions& options,
                                                               int groups) {
  std::vector<std::unique_ptr<ProcessGroup>> owned;
  for (int i = 0; i < groups; ++i) {
    std::shared_ptr<Store> own =
        i == 0 ? store : std::make_shared<PrefixStore>(store, StrCat("rr", i, "/"));
    DDPKIT_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group,
                            CreateGlooProcessGroup(env.rank, env.world_size, own, listen, options));
    owned.push_back(std::move(group));
  }
  if (groups == 1) return std::move(owned[0]);
  return std::unique_ptr<ProcessGroup>(std::make_unique<ProcessGroupRoundRobin>(std::move(owned)));
}

}  // namespace

std::string DistributedWorld::ArrivedKey(int rank) { return StrCat("ddpkit/arrived/", rank); }

absl::StatusOr<std::unique_ptr<DistributedWorld>> DistributedWorld::JoinStore(
    const EnvRendezvous& env, const ProcessGroupOptions& options) {
  std::unique_ptr<DistributedWorld> world(new DistributedWorld());
  world->world_size_ = env.world_size;
  world->timeout_ = options.timeout;
  if (env.rank == 0) {
    DDPKIT_ASSIGN_OR_RETURN(
        world->server_, TcpStoreServer::Start(env.master_addr, env.master_port, env.store_token));
  }
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect(env.master_addr, env.master_port, options.timeout, env.store_token);
  if (!store.ok()) {
    if (env.rank == 0 || absl::IsPermissionDenied(store.status())) return store.status();
    return absl::Status(store.status().code(),
                        StrCat(store.status().message(),
                               "; rank 0, which hosts the store, did not answer (dead, stuck, or "
                               "not started)"));
  }
  world->store_ = *std::move(store);
  DDPKIT_RETURN_IF_ERROR(world->store_->Set(ArrivedKey(env.rank), "1"));
  return world;
}

absl::Status DistributedWorld::Adopt(absl::StatusOr<std::unique_ptr<ProcessGroup>> group,
                                     const ProcessGroupOptions& options) {
  if (!group.ok()) {
    return RendezvousFailure(group.status(), *store_, world_size_, DiagnosisTime(options));
  }
  group_ = *std::move(group);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DistributedWorld>> DistributedWorld::InitGloo(
    const EnvRendezvous& env, ProcessGroupOptions options, int round_robin_groups) {
  DDPKIT_CHECK(round_robin_groups >= 1 && round_robin_groups <= kMaxRoundRobinGroups,
               "[InitGloo] round_robin_groups must be in [1, ", kMaxRoundRobinGroups, "], got ",
               round_robin_groups);
  DDPKIT_ASSIGN_OR_RETURN(std::unique_ptr<DistributedWorld> world, JoinStore(env, options));
  // Gloo listens on the address peers reach this host by: the one given, else loopback for a
  // local job, else the host name.
  const bool local = env.master_addr == "localhost" || absl::StartsWith(env.master_addr, "127.");
  char host[256] = "localhost";
  if (!local) ::gethostname(host, sizeof(host));
  const std::string listen = !env.local_addr.empty() ? env.local_addr : local ? "127.0.0.1" : host;
  DDPKIT_RETURN_IF_ERROR(world->Adopt(
      CreateGlooGroups(env, world->store_, listen, options, round_robin_groups), options));
  return world;
}

absl::StatusOr<std::unique_ptr<DistributedWorld>> DistributedWorld::InitNccl(
    const EnvRendezvous& env, ProcessGroupOptions options) {
  if constexpr (!kWithCuda) {
    return absl::InvalidArgumentError(kNcclUnavailable);
  } else {
    DDPKIT_ASSIGN_OR_RETURN(std::unique_ptr<DistributedWorld> world, JoinStore(env, options));
    DDPKIT_RETURN_IF_ERROR(
        world->Adopt(CreateNcclProcessGroup(env.rank, env.world_size, world->store_,
                                            Device::Cuda(env.local_rank), options),
                     options));
    return world;
  }
}

DistributedWorld::~DistributedWorld() {
  // After a failure nobody waits long: the peers that failed too have diagnosed it in the same
  // window as this rank, and a stuck one would never check out.
  const bool healthy = group_ && group_->health().ok();
  const absl::Duration bound = healthy ? timeout_ : kCheckOutAfterFailure;
  group_.reset();
  if (!store_) return;
  // Everyone checks out; rank 0 keeps serving the store until all have (or `bound`).
  if (store_->Add("ddpkit/exited", 1, bound).ok() && server_) {
    const absl::Time deadline = absl::Now() + bound;
    while (absl::Now() < deadline) {
      absl::StatusOr<int64_t> exited = store_->Add("ddpkit/exited", 0, bound);
      if (!exited.ok() || *exited >= world_size_) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  store_.reset();
  server_.reset();
}

}  // namespace ddpkit::comm
