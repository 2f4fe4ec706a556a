// Running one function per rank on a world, whatever the backend: what every job behind a
// `ddpkit` subcommand calls. It sits on the backends' own entry points — RunThreadsWorld
// (comm/threads/threads_world.h) and DistributedWorld::InitGloo / InitMpi / InitNccl
// (comm/world/rendezvous.h).
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "comm/world/world_spec.h"

namespace ddpkit::comm {

// InvalidArgument for nccl in a build without CUDA, a threads world of
// fewer than one rank, a timeout that is not positive, a negative thread count, or a
// round-robin group count outside [1, 16] (or > 1 with nccl); the messages name the flags.
absl::Status ValidateWorldSpec(const WorldSpec& world);

// The number of ranks `world` will have: world_size for threads; for gloo and nccl, WORLD_SIZE
// from the env:// rendezvous variables (InvalidArgument naming the variable when it is missing);
// for mpi, MPI_COMM_WORLD's size (initialising MPI).
absl::StatusOr<int> WorldSize(const WorldSpec& world);

// First sizes the BLAS pool by the thread budget (comm/world/thread_budget.h). Then threads: runs
// `body` on world_size rank threads of this process, each with its own group of
// one shared world. gloo and nccl: join the env:// world (`ddpkit launch` sets it up) and run
// `body` once, as this process's rank (nccl: on cuda:LOCAL_RANK); mpi: the same in the world
// mpirun or srun started. Returns OK or the first error, `body`'s whether returned or thrown
// (threads: the lowest failing rank's, prefixed "rank R: ").
absl::Status RunOnWorld(const WorldSpec& world,
                        const std::function<absl::Status(ProcessGroup&)>& body);

// Whether this rank's result is the one its process reports: rank 0 of a threads world, and
// every rank under gloo, mpi and nccl (each process is one rank; rank 0's process prints).
bool ReportsForProcess(const WorldSpec& world, const ProcessGroup& group);

}  // namespace ddpkit::comm
