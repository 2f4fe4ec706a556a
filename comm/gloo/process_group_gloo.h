// The `gloo` backend: Gloo's TCP transport (Debian's libgloo, the engine PyTorch uses on CPU),
// for several processes on one or more hosts.
//
// Ranks rendezvous through a Store (connectFullMesh). Each collective maps onto Gloo's function
// API with the sequence number as its tag and the group timeout as its timeout:
//
//   allreduce       gloo::allreduce, in place; AVG = SUM then divide; ring, or bcube with
//                   DDPKIT_GLOO_ALGORITHM=bcube
//   broadcast       gloo::broadcast
//   allgather(_v)   gloo::allgather / gloo::allgatherv
//   reduce_scatter  gloo::alltoallv of each rank's segments, then a local sum in rank order
//   all_to_all_v    gloo::alltoallv
//   barrier         gloo::barrier
//
// float16/bfloat16 are reduced in float32. When a collective fails (a Gloo timeout, or a peer
// that closed its connection), the ranks that can still reach the store record where they
// failed, so the error can name the ranks that never answered.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "comm/store/store.h"

namespace ddpkit::comm {

// `address` is this host's address for Gloo's listening socket ("127.0.0.1" for a single
// host); GLOO_SOCKET_IFNAME, when set, names an interface instead.
absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateGlooProcessGroup(
    int rank, int size, std::shared_ptr<Store> store, const std::string& address,
    ProcessGroupOptions options = {});

// The reference for `ddpkit bench`: Gloo's ring allreduce of `count` float32 elements driven
// directly on `group`'s Gloo context (no queue, no communication thread), `iterations` times;
// returns the mean time per call. `group` must be a gloo group with nothing in flight.
absl::StatusOr<absl::Duration> TimeRawGlooAllreduce(ProcessGroup& group, int64_t count,
                                                    int iterations);

}  // namespace ddpkit::comm
