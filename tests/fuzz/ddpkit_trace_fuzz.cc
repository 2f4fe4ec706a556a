// Any bytes as ddpkit trace files (split at NUL bytes into up to three, each a separate run, as
// `simulate --calibrate A.json,B.json` reads them), then through what `ddpkit trace stats|svg`
// does with the view: a view or an InvalidArgument of one line, never a crash; an accepted view
// has ranks in order, each once and inside the world, and every span and instant with finite
// times that do not run backwards.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/fuzz/trace_view_checks.h"
#include "tools/trace/parse_trace.h"
#include "tools/trace/runs.h"
#include "tools/trace/stats.h"
#include "tools/trace/timeline.h"

namespace {

using ddpkit::trace::TraceView;

void CheckOneLine(const absl::Status& status) {
  if (status.message().find('\n') != std::string::npos) std::abort();
}

// The shared checks, and every rank inside the job's world.
void CheckView(const TraceView& view) {
  ddpkit::fuzz::CheckView(view);
  for (const ddpkit::trace::RankView& r : view.ranks) {
    if (r.rank < 0 || r.rank >= view.world_size) std::abort();
  }
}

// The runs in `bytes`, as one view (RunsOneAfterAnother when there are several).
absl::StatusOr<TraceView> ViewOf(const std::string& bytes) {
  std::vector<TraceView> runs;
  std::vector<std::string> names;
  size_t from = 0;
  while (runs.size() < 3) {
    const size_t nul = bytes.find('\0', from);
    const std::string text = bytes.substr(from, nul == std::string::npos ? nul : nul - from);
    names.push_back("run" + std::to_string(runs.size()) + ".json");
    const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded()) return absl::InvalidArgumentError(names.back() + ": not JSON");
    absl::StatusOr<TraceView> run = ddpkit::trace::ParseTrace(json, names.back());
    if (!run.ok()) return run.status();
    CheckView(*run);
    runs.push_back(*std::move(run));
    if (nul == std::string::npos) break;
    from = nul + 1;
  }
  if (runs.size() == 1) return std::move(runs[0]);
  return ddpkit::trace::RunsOneAfterAnother(std::move(runs), names);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<TraceView> view = ViewOf(std::string(reinterpret_cast<const char*>(data), size));
  if (!view.ok()) {
    CheckOneLine(view.status());
    return 0;
  }
  CheckView(*view);
  ddpkit::trace::ComputeTraceStats(*view);
  absl::StatusOr<std::string> svg = ddpkit::trace::TimelineSvg(*view, {.end_iteration = 2});
  if (!svg.ok()) CheckOneLine(svg.status());
  return 0;
}
