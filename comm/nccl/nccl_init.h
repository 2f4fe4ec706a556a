// Making one NCCL communicator for a world, through the Store, without ever hanging:
//
//   1. every rank publishes its GPU's PCI bus id and reads everyone's: a rank that does not
//      come is named when the timeout passes, and two ranks on one GPU (which NCCL would
//      refuse with an error far from the cause, or hang on) fail here, on every rank alike;
//   2. rank 0 draws the ncclUniqueId and publishes it; the others read it;
//   3. ncclCommInitRankConfig with blocking = 0, polled until the communicator is ready or the
//      deadline passes (then aborted).
//
// The whole of it is bounded by one deadline: the group's timeout from the start. Keys live
// under "nccl/<n>/", n counting the NCCL groups this rank has made on the store, so a second
// group on the same store never reads the first one's id. CUDA builds only.
#pragma once

#include <nccl.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "autograd/device.h"
#include "comm/store/store.h"

namespace ddpkit::comm::nccl {

struct Communicator {
  ncclComm_t comm = nullptr;
  std::string store_prefix;  // "nccl/<n>/": where this group's keys live in the store
};

absl::StatusOr<Communicator> InitCommunicator(int rank, int size, Store& store, Device device,
                                              absl::Duration timeout);

}  // namespace ddpkit::comm::nccl
