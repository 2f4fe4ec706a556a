// The contrastive job's training curves as files: a CSV a spreadsheet reads and an SVG a person
// looks at (a loss panel and an accuracy panel, one line per run).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "tools/jobs/contrastive/contrastive_report.pb.h"

namespace ddpkit::jobs {

// step,layout,gather,loss,accuracy — one row per step of every run; accuracy where measured.
std::string CurvesCsv(const ContrastiveReport& report);
std::string CurvesSvg(const ContrastiveReport& report);

// Writes curves.csv and curves.svg into `dir` (created if missing), each atomically.
absl::Status WriteCurves(const ContrastiveReport& report, const std::string& dir);

}  // namespace ddpkit::jobs
