#include "comm/rendezvous.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/log.h"
#include "comm/gloo/process_group_gloo.h"
#include "comm/mpi/host_address.h"
#include "comm/mpi/mpi_runtime.h"
#include "comm/mpi/process_group_mpi.h"
#include "comm/nccl/process_group_nccl.h"
#include "comm/round_robin.h"
#include "comm/slurm_env.h"
#include "comm/store/token.h"

namespace ddpkit::comm {
namespace {

// A variable from the environment, else from Slurm's (comm/slurm_env.h); null when neither has it.
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

// How long rank 0 keeps the store up for its peers' check-out after a failure.
constexpr absl::Duration kCheckOutAfterFailure = absl::Milliseconds(500);

std::string ArrivedKey(int rank) { return StrCat("ddpkit/arrived/", rank); }

// The ranks that have not checked in at the rendezvous (empty when the store cannot say).
std::vector<int> MissingRanks(Store& store, int world_size, absl::Duration reply_timeout) {
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    absl::StatusOr<bool> there = store.Check({ArrivedKey(r)}, reply_timeout);
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

// A view of a store with every key under `prefix`: each round-robin group after the first
// rendezvouses (and records its failures) in its own namespace, so their keys do not clash.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}
  absl::Status Set(const std::string& key, const std::string& value,
                   absl::Duration reply_timeout) override {
    return store_->Set(prefix_ + key, value, reply_timeout);
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    return store_->Get(prefix_ + key, timeout);
  }
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta,
                              absl::Duration reply_timeout) override {
    return store_->Add(prefix_ + key, delta, reply_timeout);
  }
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override {
    return store_->Wait(Prefixed(keys), timeout);
  }
  absl::StatusOr<bool> Check(const std::vector<std::string>& keys,
                             absl::Duration reply_timeout) override {
    return store_->Check(Prefixed(keys), reply_timeout);
  }

 private:
  std::vector<std::string> Prefixed(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const std::string& k : keys) out.push_back(prefix_ + k);
    return out;
  }
  std::shared_ptr<Store> store_;
  std::string prefix_;
};

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

namespace {

// `text` on `root`, to every rank of MPI_COMM_WORLD, within `timeout` (a rank that never comes
// fails the others instead of hanging them). On the main thread, before any group exists.
absl::Status BroadcastString(std::string& text, int root, absl::Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  auto run = [&](void* data, int count, MPI_Datatype type) -> absl::Status {
    MPI_Request request;
    DDPKIT_RETURN_IF_ERROR(
        mpi::Check(MPI_Ibcast(data, count, type, root, MPI_COMM_WORLD, &request), "MPI_Ibcast"));
    for (int done = 0;;) {
      DDPKIT_RETURN_IF_ERROR(mpi::Check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test"));
      if (done) return absl::OkStatus();
      if (std::chrono::steady_clock::now() >= deadline) {
        mpi::MarkAbandoned();
        return absl::DeadlineExceededError(
            StrCat("mpi: the rendezvous (rank 0 telling every rank where its store is) timed out "
                   "after ",
                   absl::FormatDuration(timeout), "; a rank is dead, stuck, or not started"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  };
  int length = static_cast<int>(text.size());
  DDPKIT_RETURN_IF_ERROR(run(&length, 1, MPI_INT));
  text.resize(length);
  return run(text.data(), length, MPI_CHAR);
}

// Rank 0's store for the failure diagnosis, and this rank's client of it.
struct MpiStore {
  std::unique_ptr<TcpStoreServer> server;  // rank 0 only
  std::shared_ptr<TcpStore> client;
};

// Rank 0 serves the store, on loopback when every rank is on this host, else where the other
// hosts reach it (not simply the host's name: /etc/hosts may map that to 127.x); it tells the
// others where through MPI, and each connects and records its arrival.
absl::StatusOr<MpiStore> JoinMpiStore(int rank, int size, absl::Duration timeout) {
  MpiStore store;
  std::string where;  // "host port token", or "" when rank 0 could not start it
  absl::Status served;
  if (rank == 0) {
    const std::string host =
        mpi::RanksOnThisHost() == size ? "127.0.0.1" : mpi::AddressForOtherHosts();
    absl::StatusOr<std::string> token = NewStoreToken();
    absl::StatusOr<std::unique_ptr<TcpStoreServer>> server =
        token.ok() ? TcpStoreServer::Start(host, 0, *token)
                   : absl::StatusOr<std::unique_ptr<TcpStoreServer>>(token.status());
    served = server.status();
    if (server.ok()) {
      store.server = *std::move(server);
      where = StrCat(host, " ", store.server->port(), " ", *token);
    }
  }
  DDPKIT_RETURN_IF_ERROR(BroadcastString(where, 0, timeout));
  DDPKIT_RETURN_IF_ERROR(served);
  std::vector<std::string> parts = absl::StrSplit(where, ' ');
  int port = 0;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &port)) {
    return absl::UnavailableError("mpi: rank 0 could not start the job's store (see its error)");
  }
  DDPKIT_ASSIGN_OR_RETURN(store.client, TcpStore::Connect(parts[0], port, timeout, parts[2]));
  DDPKIT_RETURN_IF_ERROR(store.client->Set(ArrivedKey(rank), "1"));
  return store;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DistributedWorld>> DistributedWorld::InitMpi(
    ProcessGroupOptions options, int round_robin_groups) {
  DDPKIT_CHECK(round_robin_groups >= 1 && round_robin_groups <= kMaxRoundRobinGroups,
               "[InitMpi] round_robin_groups must be in [1, ", kMaxRoundRobinGroups, "], got ",
               round_robin_groups);
  DDPKIT_RETURN_IF_ERROR(mpi::EnsureInitialized());
  const int rank = mpi::WorldRank(), size = mpi::WorldSize();
  absl::StatusOr<MpiStore> store = JoinMpiStore(rank, size, options.timeout);
  if (!store.ok()) {
    // The other ranks may already wait for this one in MPI_Comm_dup below, and MPI_Finalize at
    // exit would wait for them in turn: end without it, so mpirun ends them.
    mpi::MarkAbandoned();
    return store.status();
  }
  std::unique_ptr<DistributedWorld> world(new DistributedWorld());
  world->world_size_ = size;
  world->timeout_ = options.timeout;
  world->server_ = std::move(store->server);
  world->store_ = std::move(store->client);
  std::vector<std::unique_ptr<ProcessGroup>> groups;
  for (int i = 0; i < round_robin_groups; ++i) {
    std::shared_ptr<Store> own =
        i == 0 ? std::shared_ptr<Store>(world->store_)
               : std::make_shared<PrefixStore>(world->store_, StrCat("rr", i, "/"));
    absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
        CreateMpiProcessGroup(MPI_COMM_WORLD, own, options);
    if (!group.ok()) return group.status();
    groups.push_back(*std::move(group));
  }
  world->group_ = round_robin_groups == 1
                      ? std::move(groups[0])
                      : std::make_unique<ProcessGroupRoundRobin>(std::move(groups));
  return world;
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
