#include "tools/jobs/recompute/recompute_trace.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "autograd/base/error.h"
#include "autograd/base/file_util.h"
#include "tools/plot/svg.h"
#include "tools/trace/parse_trace.h"
#include "tools/trace/timeline.h"

namespace ddpkit::jobs {
namespace {

std::string Stem(const std::string& path) {
  return absl::EndsWith(path, ".json") ? path.substr(0, path.size() - 5) : path;
}

constexpr double kFullWidth = 1200;
constexpr double kTitleHeight = 28;

}  // namespace

std::string RunTracePath(const std::string& trace_path, const std::string& run) {
  return trace_path.empty() ? "" : StrCat(Stem(trace_path), ".", run, ".json");
}

std::string SideBySidePath(const std::string& trace_path) { return Stem(trace_path) + ".svg"; }

absl::Status WriteSideBySideTimelines(const std::string& trace_path, comm::Backend backend,
                                      RecomputeReport& report) {
  if (!comm::InfoOf(backend).ranks_share_process) return absl::OkStatus();
  std::vector<const RecomputeRun*> runs;
  std::vector<trace::TraceView> views;
  for (const RecomputeRun& run : report.runs()) {
    if (!run.ok()) continue;
    DDPKIT_ASSIGN_OR_RETURN(trace::TraceView view,
                            trace::ReadTraceFile(RunTracePath(trace_path, run.name())));
    runs.push_back(&run);
    views.push_back(std::move(view));
  }
  // Iterations 2 and 3: after the bucket rebuild. One time axis for both: the longer span.
  trace::TimelineOptions options{.first_iteration = 2, .end_iteration = 4, .width = kFullWidth};
  if (report.steps() < 4) options.first_iteration = 0, options.end_iteration = report.steps();
  for (const trace::TraceView& view : views) {
    options.span_ms = std::max(options.span_ms, trace::TimelineSpanMs(view, options));
  }
  std::vector<std::pair<std::string, std::string>> pictures;  // title, svg
  for (size_t i = 0; i < views.size(); ++i) {
    const RecomputeRun& run = *runs[i];
    DDPKIT_ASSIGN_OR_RETURN(std::string svg, trace::TimelineSvg(views[i], options));
    pictures.emplace_back(
        absl::StrFormat("%s (%s): step %.1f ms (median), communication %.1f ms, %.1f ms exposed",
                        run.name(), run.ddp_options(), run.step_ms_median(), run.comm_ms(),
                        run.exposed_comm_ms()),
        std::move(svg));
  }
  double height = 0, width = 0;
  for (const auto& [title, svg] : pictures) {
    const auto [w, h] = plot::SvgSize(svg);
    width = std::max(width, w);
    height += kTitleHeight + h;
  }
  plot::Svg page(width, height);
  double y = 0;
  for (const auto& [title, svg] : pictures) {
    page.Text(12, y + 19, title, 14, "start", "#222222", /*bold=*/true);
    page.Embed(0, y + kTitleHeight, svg);
    y += kTitleHeight + plot::SvgSize(svg).second;
  }
  const std::string path = SideBySidePath(trace_path);
  DDPKIT_RETURN_IF_ERROR(WriteFileAtomically(path, page.Finish()));
  report.add_trace_files(path);
  return absl::OkStatus();
}

}  // namespace ddpkit::jobs
