// Which algorithm Open MPI's nonblocking allreduce runs, chosen per call by size.
//
// ddpkit's allreduce is MPI_Iallreduce, polled (the timeout needs it: process_group_mpi.cc),
// and Open MPI runs nonblocking collectives in its libnbc component. Left to itself, libnbc
// runs an in-place call — DDP's buckets are reduced in place — as a binomial reduce to rank 0
// followed by a broadcast: the whole buffer crosses the links twice, one hop after another, and
// rank 0 adds every rank's copy. Its ring moves 2(N-1)/N of the buffer per rank and shares the
// adding out. Measured here (2-core VM, OpenMPI 4.1, shared memory, `bench allreduce`, medians
// of 6 runs): 2 ranks, 8 MiB 4.3 -> 2.7 ms, level with the blocking MPI_Allreduce from 1 MiB;
// below 512 KiB the ring's extra steps cost 3 and 4 ranks 20-70 us (docs/comm.md,
// docs/performance.md). So calls of at least kRingFromBytes run the ring and smaller ones libnbc's
// own choice — where every rank on the host has a core. Beyond that the ring's 2(N-1) steps each
// wait for a peer the cores left descheduled: 4 ranks on 2 cores took a DDP step from 47 to 55 ms
// (medians of 8 runs each, an MLP of 11.7 MB), so there libnbc chooses at every size — on every
// host when any host is oversubscribed (mpi_runtime.h, EveryRankHasACore): the ranks must agree,
// and the call's size and that one flag are the same on all of them.
//
// A user who set the algorithm (mpirun --mca coll_libnbc_iallreduce_algorithm, an OMPI_MCA_
// variable, a parameter file) keeps it for every call. Another MPI, or an Open MPI without the
// variable, runs as it would without ddpkit.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "absl/status/status.h"

namespace ddpkit::comm::mpi {

inline constexpr int64_t kRingFromBytes = int64_t{512} << 10;

enum class AllreduceAlgorithm {
  kLibraryDefault,  // libnbc's own choice (binomial for an in-place call): small, or oversubscribed
  kRing,
  kUsers,      // the user's setting, for every size
  kUnchanged,  // not Open MPI's libnbc, or its variable cannot be written: nothing is set
};

// What a call of `bytes` runs. MPI must be initialised.
AllreduceAlgorithm AllreduceAlgorithmFor(int64_t bytes);

// Sets the algorithm for the next MPI_Iallreduce of `bytes`, which the caller starts while
// holding the returned lock (and releases after: the call's progress needs no lock): the
// setting is one per process, and each process group's communication thread starts its own
// calls. `status`: an error, naming the setting to make by hand, when MPI refused the write.
std::unique_lock<std::mutex> ChooseAllreduceAlgorithm(int64_t bytes, absl::Status& status);

// In words, for logs and tests: "ring from 512 KiB, libnbc's own below", "the user's (2)", ...
std::string DescribeAllreduceAlgorithms();

}  // namespace ddpkit::comm::mpi
