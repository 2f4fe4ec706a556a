// DistributedWorld::InitMpi: the mpi backend's world, its store found through MPI itself.
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "comm/mpi/host_address.h"
#include "comm/mpi/mpi_runtime.h"
#include "comm/mpi/process_group_mpi.h"
#include "comm/round_robin.h"
#include "comm/store/prefix_store.h"
#include "comm/store/token.h"
#include "comm/world/rendezvous.h"

namespace ddpkit::comm {

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
// others where through MPI, and each connects to it.
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
  DDPKIT_RETURN_IF_ERROR(world->store_->Set(ArrivedKey(rank), "1"));
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

}  // namespace ddpkit::comm
