// Any bytes as ddpkit trace files (split at NUL bytes into up to three, each a separate run, as
// `simulate --calibrate A.json,B.json` reads them), then through what `ddpkit trace stats|svg`
// does with the view: a view or an InvalidArgument of one line, never a crash; an accepted view
// has ranks in order, each once and inside the world, and every span and instant with finite
// times that do not run backwards.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/trace/parse_trace.h"
#include "tools/trace/runs.h"
#include "tools/trace/stats.h"
#include "tools/trace/timeline.h"

namespace {

using ddpkit::trace::TraceItem;
using ddpkit::trace::TraceView;

void CheckOneLine(const absl::Status& status) {
  if (status.message().find('\n') != std::string::npos) std::abort();
}

void CheckItems(const std::vector<TraceItem>& items) {
  for (const TraceItem& i : items) {
    if (!std::isfinite(i.start_us) || !std::isfinite(i.end_us) || i.end_us < i.start_us) {
      std::abort();
    }
  }
}

void CheckView(const TraceView& view) {
  for (size_t r = 0; r < view.ranks.size(); ++r) {
    const int rank = view.ranks[r].rank;
    if (rank < 0 || rank >= view.world_size) std::abort();
    if (r > 0 && rank <= view.ranks[r - 1].rank) std::abort();
    CheckItems(view.ranks[r].phases);
    CheckItems(view.ranks[r].hooks);
    CheckItems(view.ranks[r].collectives);
    CheckItems(view.ranks[r].instants);
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
