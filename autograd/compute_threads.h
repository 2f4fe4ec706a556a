// How many threads one GEMM or elementwise loop may use: the OpenMP team each thread's oneDNN
// GEMMs and large elementwise loops (autograd/parallel.h) run on. Ranks that each compute at
// once should together use about the cores there are; more only makes them take turns
// (comm/world/thread_budget.h sets it per job). OpenBLAS (float64, thin products) then runs on the
// calling thread alone.
#pragma once

namespace ddpkit {

int ComputeThreads();
// threads >= 1; the pool grows or shrinks at once, for the next BLAS call.
void SetComputeThreads(int threads);

// The CPUs this process may run on (its affinity mask, which taskset, Slurm and containers set),
// at least 1.
int AvailableCores();

}  // namespace ddpkit
