// Joining a world of processes: the job's store (rank 0 serves it) and this rank's process group,
// on gloo or nccl from the env:// variables (comm/world/env_rendezvous.h), on mpi from MPI
// (mpi_rendezvous.cc).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "comm/store/tcp_store.h"
#include "comm/world/env_rendezvous.h"

namespace ddpkit::comm {

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
  // The key each rank sets in the store when it arrives; the ones missing name who never came.
  static std::string ArrivedKey(int rank);
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
