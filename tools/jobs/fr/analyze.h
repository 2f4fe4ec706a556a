// `ddpkit fr analyze DIR`: the ranks' flight-recorder dumps (comm/flight_recorder_dump.h) read
// side by side, as PyTorch's flight-recorder analyser does: entries matched across ranks by
// sequence number, and the first collective where ranks disagree or one is missing named —
// "rank 2 never issued ALLREDUCE seq 1734 (bucket 0); ranks 0, 1 waited 10 s" — with each
// rank's last collectives.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "tools/jobs/fr/fr_report.pb.h"

namespace ddpkit::jobs {

// NotFound when DIR holds no dump; InvalidArgument naming a file that is not one. With
// `plan_path` (a plan file of the job's model, PyTorch's dumps only) the default group's
// calls are named by what DDP issued them for (ddp_labels.h), and a rank that stopped a whole
// iteration early is called uneven inputs.
absl::StatusOr<FlightRecorderAnalysis> AnalyzeFlightRecorders(const std::string& dir,
                                                              int last_entries = 8,
                                                              const std::string& plan_path = "");

}  // namespace ddpkit::jobs
