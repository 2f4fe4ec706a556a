// The `mpi` backend: an MPI library (Debian's OpenMPI) for several processes on one or more
// hosts, started by `mpirun` or Slurm's `srun`, which give each process its rank and the world
// its size. Where Gloo moves every byte through TCP sockets, MPI picks a transport per peer:
// shared memory between ranks on one host (OpenMPI's vader), the cluster's fabric between hosts.
//
// Each collective maps onto MPI's nonblocking call on this group's own communicator:
//
//   allreduce       MPI_Iallreduce, in place; AVG = SUM then divide
//   broadcast       MPI_Ibcast
//   allgather(_v)   MPI_Iallgather / MPI_Iallgatherv
//   reduce_scatter  MPI_Ireduce_scatter
//   all_to_all_v    MPI_Ialltoallv
//   barrier         MPI_Ibarrier
//
// and the communication thread polls it (MPI_Test) until it completes or the group's timeout
// passes: then the error names the op, its sequence number and — through the job's store, which
// rank 0 hosts — the ranks that never reached it, as on gloo. MPI cannot cancel a collective, so
// the process then ends without MPI_Finalize and the launcher ends the others (mpi_runtime.h).
// float16/bfloat16 are reduced in float32. Counts beyond 2^31 - 1 elements (MPI's int) are
// refused, but allreduce and broadcast, which go in pieces.
#pragma once

#include <mpi.h>

#include <memory>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "comm/store/store.h"

namespace ddpkit::comm {

// A group over a duplicate of `comm` (MPI must be initialised: comm/mpi/mpi_runtime.h). `store`
// serves the failure diagnosis.
absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateMpiProcessGroup(
    MPI_Comm comm, std::shared_ptr<Store> store, ProcessGroupOptions options = {});

// The reference for `ddpkit bench allreduce --backend mpi`: MPI_Allreduce of `count` float32
// elements in place on `group`'s communicator, called directly (no queue, no communication
// thread), `iterations` times; the mean time per call. Nothing may be in flight on `group`.
absl::StatusOr<absl::Duration> TimeRawMpiAllreduce(ProcessGroup& group, int64_t count,
                                                   int iterations);

}  // namespace ddpkit::comm
