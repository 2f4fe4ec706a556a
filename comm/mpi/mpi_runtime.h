// The MPI library's lifetime in this process: MPI_Init_thread once (MPI_THREAD_MULTIPLE, since
// each process group's communication thread calls MPI on its own), MPI_Finalize at exit — unless
// a collective was abandoned at its timeout (MPI cannot cancel one), in which case the process
// ends without finalizing and mpirun (or srun) ends the job's other processes.
#pragma once

#include <mpi.h>

#include <string>

#include "absl/status/statusor.h"

namespace ddpkit::comm::mpi {

// Initialises MPI on the first call (registering MPI_Finalize for exit). FailedPrecondition
// when the library cannot give MPI_THREAD_MULTIPLE.
absl::Status EnsureInitialized();

// This process's rank and the world's size (MPI_COMM_WORLD), and how many of its ranks share
// this host (MPI_COMM_TYPE_SHARED). Initialise first.
int WorldRank();
int WorldSize();
int RanksOnThisHost();
int CoresOnThisHost();  // online CPUs
// No host has more ranks than cores: the same answer on every rank (one allreduce at start).
bool EveryRankHasACore();

// OK, or an Unavailable error with MPI's own description of `code`, prefixed by `what`.
absl::Status Check(int code, std::string_view what);

// A collective could not be completed, or this rank failed while the others may wait for it in
// one: skip MPI_Finalize at exit (it would wait for them).
void MarkAbandoned();

}  // namespace ddpkit::comm::mpi
