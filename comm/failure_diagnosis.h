// Who did not arrive: after a collective fails in a multi-process world (gloo, mpi), the ranks
// that can still reach the job's store record where they failed, and each reads who else has.
// A live rank still waiting inside a collective (on a peer, not yet failed) records that too,
// from its deadline watch. A rank that never records itself within DiagnosisTime() is the one to
// name: dead, stuck, or issuing something else. A store that does not answer (its host, rank 0,
// dead or stuck) is itself the answer.
#pragma once

#include <cstdint>
#include <functional>
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
//
// `once_recorded` runs as soon as this rank's own record is in the store. A backend that can
// closes its links to its peers there: a live peer still waiting on this rank inside the
// collective then fails at once and records itself, so it is not named beside the dead rank.
std::string RanksThatDidNotArrive(Store& store, int rank, int size, uint64_t sequence_number,
                                  const ProcessGroupOptions& options,
                                  const std::function<void()>& once_recorded = {});

// For a rank inside collective `sequence_number` for a while (its deadline watch asks every
// 200 ms): when a peer has failed, records this rank as alive and waiting in it, so the failed
// peers' diagnosis does not name it beside the dead rank ("; rank 2 reached it and, alive, still
// waited in it for a peer"). True once recorded.
bool RecordWaitingIfAPeerFailed(Store& store, int rank, uint64_t sequence_number,
                                absl::Duration reply_timeout);

}  // namespace ddpkit::comm
