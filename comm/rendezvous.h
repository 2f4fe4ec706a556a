// env:// rendezvous, as torchrun: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE (required),
// LOCAL_RANK, LOCAL_WORLD_SIZE and DDPKIT_STORE_TOKEN (optional). `ddpkit launch` sets them; in
// a Slurm step started by srun, those unset come from SLURM_* (comm/slurm_env.h).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "comm/store/tcp_store.h"

namespace ddpkit::comm {

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

// A process's membership of a multi-process world: the store (served by rank 0 on MASTER_ADDR
// only, requiring the token when there is one) and the
// process group. Destroying it waits (bounded) until every rank is done with the store, so
// rank 0 does not take the store away from ranks still shutting down.
class DistributedWorld {
 public:
  // round_robin_groups K > 1: group() is a ProcessGroupRoundRobin over K gloo groups, each
  // with its own connections and store namespace (comm/round_robin.h).
  static absl::StatusOr<std::unique_ptr<DistributedWorld>> InitGloo(
      const EnvRendezvous& env, ProcessGroupOptions options = {}, int round_robin_groups = 1);
  // The nccl backend on this process's GPU, cuda:LOCAL_RANK (one GPU per local rank, as
  // torchrun's jobs pick theirs). InvalidArgument in a build without CUDA.
  static absl::StatusOr<std::unique_ptr<DistributedWorld>> InitNccl(
      const EnvRendezvous& env, ProcessGroupOptions options = {});
  // The mpi backend (comm/mpi/): rank and size from MPI, as mpirun or srun started this
  // process. Rank 0 hosts the store (for the failure diagnosis) on a free port with a fresh
  // token and tells the others where through MPI. K > 1: K groups, each on its own communicator.
  static absl::StatusOr<std::unique_ptr<DistributedWorld>> InitMpi(ProcessGroupOptions options = {},
                                                                   int round_robin_groups = 1);
  ~DistributedWorld();
  ProcessGroup& group() { return *group_; }
  Store& store() { return *store_; }

 private:
  DistributedWorld() = default;
  // The store (served here on rank 0) and this rank's check-in: the first half of every Init.
  static absl::StatusOr<std::unique_ptr<DistributedWorld>> JoinStore(
      const EnvRendezvous& env, const ProcessGroupOptions& options);
  // Keeps `group`, or returns its error with the ranks that never checked in named.
  absl::Status Adopt(absl::StatusOr<std::unique_ptr<ProcessGroup>> group,
                     const ProcessGroupOptions& options);
  int world_size_ = 1;
  absl::Duration timeout_;
  std::unique_ptr<TcpStoreServer> server_;  // rank 0 only
  std::shared_ptr<TcpStore> store_;
  std::unique_ptr<ProcessGroup> group_;
};

}  // namespace ddpkit::comm
