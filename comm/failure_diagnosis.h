// Who did not arrive: after a collective fails in a multi-process world (gloo, mpi), the ranks
// that can still reach the job's store record where they failed, and each reads who else has.
// A rank that never records itself within DiagnosisTime() is the one to name: dead, stuck, or
// issuing something else. A store that does not answer (its host, rank 0, dead or stuck) is
// itself the answer.
#pragma once

#include <cstdint>
#include <string>

#include "comm/process_group.h"
#include "comm/store/store.h"

namespace ddpkit::comm {

// "; rank 2 did not reach this collective (dead, stuck, or issuing something else)", "; rank 0
// did not answer through the store it hosts (dead or stuck)", "; every rank reached this
// collective and failed in it or the next ..." when every rank recorded itself there (a lossy or
// flapping link between live ranks), or "; rank 0, which hosts the store, did not answer ..." when
// the store answered this rank's record and then went quiet (a lossy link to it). Takes at most
// about DiagnosisTime().
std::string RanksThatDidNotArrive(Store& store, int rank, int size, uint64_t sequence_number,
                                  const ProcessGroupOptions& options);

}  // namespace ddpkit::comm
