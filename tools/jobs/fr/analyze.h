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

// NotFound when DIR holds no dump; InvalidArgument naming a file that is not one.
absl::StatusOr<FlightRecorderAnalysis> AnalyzeFlightRecorders(const std::string& dir,
                                                              int last_entries = 8);

}  // namespace ddpkit::jobs
