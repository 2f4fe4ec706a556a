// DDPKIT_HOST_DEVICE marks small functions (the pointwise math of ops and optimizers) that both
// the host loops and the CUDA kernels call, so each formula is written once.
#pragma once

#ifdef __CUDACC__
#define DDPKIT_HOST_DEVICE __host__ __device__
#else
#define DDPKIT_HOST_DEVICE
#endif
