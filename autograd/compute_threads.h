// How many threads one GEMM may use: the size of OpenBLAS's pool, which every float64 GEMM of
// every rank in this process shares, and of the OpenMP team each thread's oneDNN GEMMs run on.
// Ranks that each run a GEMM at once should together use about the cores there are; more only
// makes them take turns (comm/thread_budget.h sets it per job).
#pragma once

namespace ddpkit {

int ComputeThreads();
// threads >= 1; the pool grows or shrinks at once, for the next BLAS call.
void SetComputeThreads(int threads);

// The CPUs this process may run on (its affinity mask, which taskset, Slurm and containers set),
// at least 1.
int AvailableCores();

}  // namespace ddpkit
