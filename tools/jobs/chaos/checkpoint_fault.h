// `ddpkit chaos --faults ... --fault-when checkpoint`: the fault comes while the job writes a
// checkpoint (train, a checkpoint after every step), and the trial then checks what a user
// relies on: every committed checkpoint left in the folder still verifies (manifest, sizes,
// CRC-32s: nothing half-written), and a restarted run resumed from a step no older than the
// newest one committed when the fault came (nothing saved was lost). Whether the resumed run
// ended bitwise equal to the clean run is the wire trial's own judgement.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tools/jobs/chaos/chaos_report.pb.h"

namespace ddpkit::jobs {

// The newest committed step in `dir` (-1: none yet).
int64_t NewestCommittedStep(const std::string& dir);

// Waits until a checkpoint is being written in `dir` (a .tmp-step-N-PID folder exists) and
// returns that folder's name, or nullopt at `deadline`. Polls every 0.2 ms: a checkpoint of the
// chaos job takes a few milliseconds.
std::optional<std::string> WaitForCheckpointInFlight(const std::string& dir, absl::Time deadline);

// After the trial: verifies every committed checkpoint in `dir`, reads the steps the restarted
// runs resumed from out of the log `lines`, and records both in `row` (clear_error false, with
// the reason, when a checkpoint is damaged or a resume went back past `committed_at_fault`).
void JudgeCheckpoints(const std::string& dir, const std::vector<std::string>& lines,
                      int64_t committed_at_fault, ChaosTrial& row);

}  // namespace ddpkit::jobs
