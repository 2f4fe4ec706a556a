// `ddpkit varlen --out DIR`: the run as pictures and a table a spreadsheet reads.
//
// imbalance.svg — padded tokens per rank per step, before the sort (sampler shares sorted per
// rank) and after (sorted globally, dealt round-robin), both with the trained batching; under
// them each layout's max ÷ mean per step, and the training loss with the scaled LR.
// steps.csv — step, global batch, longest sample, LR, loss, then each rank's batch size.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "tools/jobs/varlen/varlen_report.pb.h"

namespace ddpkit::jobs {

std::string ImbalanceSvg(const VarlenReport& report);
std::string StepsCsv(const VarlenReport& report);

// Writes imbalance.svg and steps.csv into `dir` (created if missing), each atomically.
absl::Status WriteVarlenPlots(const VarlenReport& report, const std::string& dir);

}  // namespace ddpkit::jobs
