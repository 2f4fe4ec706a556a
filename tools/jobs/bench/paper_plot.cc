// The picture of `ddpkit bench paper --out DIR`: its three experiments side by side, each
// panel read the way the DDP paper's figures are.
#include <algorithm>

#include "absl/strings/str_format.h"
#include "tools/jobs/bench/bench.h"
#include "tools/plot/svg.h"

namespace ddpkit::jobs {
namespace {

constexpr double kPanelWidth = 400, kPanelHeight = 380;
constexpr double kTop = 70, kPlotHeight = 220, kPlotWidth = 300, kLeft = 62;

plot::Style Fill(int colour) {
  return {.stroke = "#ffffff", .width = 0.5, .fill = plot::Colour(colour)};
}

// Panels 2 and 3 show whole steps, which panel 1's colours split into phases: they are drawn in
// greys so that no colour means two things.
constexpr char kStepColour[] = "#6e6e6e";
constexpr char kReferenceColour[] = "#c8c8c8";

// The y range [0, top] with room above the tallest value for its label.
double Top(double tallest) { return tallest > 0 ? tallest * 1.18 : 1; }

plot::Axes PanelAxes(double left, int categories, double top) {
  return {.x = left + kLeft,
          .y = kTop,
          .width = kPlotWidth,
          .height = kPlotHeight,
          .x_min = -0.5,
          .x_max = categories - 0.5,
          .y_min = 0,
          .y_max = top};
}

// The fastest-to-slowest range of a measurement's timed steps: a vertical line with end caps.
void Whisker(plot::Svg& svg, const plot::Axes& axes, double x, double lo, double hi) {
  if (hi <= lo) return;
  const plot::Style style{.stroke = "#111111", .width = 1.2};
  svg.Line(x, axes.Y(lo), x, axes.Y(hi), style,
           absl::StrFormat("range of the timed steps: %.2f-%.2f ms", lo, hi));
  for (double y : {lo, hi}) svg.Line(x - 5, axes.Y(y), x + 5, axes.Y(y), style);
}

void Title(plot::Svg& svg, double left, const std::string& title, const std::string& subtitle) {
  svg.Text(left + kLeft, 28, title, 13, "start", "#222222", true);
  svg.Text(left + kLeft, 46, subtitle, 11, "start", "#555555");
}

// 1. A stacked bar per mode: forward, backward compute, exposed communication, optimizer.
void BreakdownPanel(plot::Svg& svg, const BenchPaperReport& r, double left) {
  double tallest = 0;
  for (const PhaseBreakdown& b : r.breakdown()) {
    tallest = std::max(
        {tallest, b.forward_ms() + b.backward_compute_ms() + b.exposed_comm_ms() + b.optimizer_ms(),
         b.step_max_ms()});
  }
  const plot::Axes axes = PanelAxes(left, r.breakdown_size(), Top(tallest));
  std::vector<std::string> modes;
  for (const PhaseBreakdown& b : r.breakdown()) modes.push_back(b.mode());
  plot::DrawCategoryAxes(svg, axes, modes, "", "milliseconds per step");
  for (int i = 0; i < r.breakdown_size(); ++i) {
    const PhaseBreakdown& b = r.breakdown(i);
    const double parts[] = {b.forward_ms(), b.backward_compute_ms(), b.exposed_comm_ms(),
                            b.optimizer_ms()};
    const char* names[] = {"forward", "backward compute", "exposed comm", "optimizer"};
    const double x = axes.X(i) - 40;
    double base = 0;
    for (int p = 0; p < 4; ++p) {
      svg.Rect(x, axes.Y(base + parts[p]), 80, axes.Y(base) - axes.Y(base + parts[p]), Fill(p),
               absl::StrFormat("%s: %.2f ms", names[p], parts[p]));
      base += parts[p];
    }
    Whisker(svg, axes, axes.X(i) + 48, b.step_min_ms(), b.step_max_ms());
    svg.Text(axes.X(i), axes.Y(std::max(base, b.step_max_ms())) - 6,
             absl::StrFormat("step %.1f ms", b.step_ms()), 11, "middle");
  }
  plot::DrawLegend(svg, left + kLeft, kTop + kPlotHeight + 52,
                   {{"forward", Fill(0), true},
                    {"backward compute", Fill(1), true},
                    {"exposed comm", Fill(2), true},
                    {"optimizer", Fill(3), true}},
                   2, 150);
  Title(svg, left, "1. Where a step goes",
        absl::StrFormat("overlap makes the step %.0f%% faster (paper: 21-39%%)",
                        100 * r.overlap_speedup()));
}

// 2. Step time against the bucket cap, each point labelled with its bucket count.
void CapPanel(plot::Svg& svg, const BenchPaperReport& r, double left) {
  double tallest = 0;
  std::vector<std::string> caps;
  plot::Series series{.label = "step", .style = {.stroke = kStepColour, .width = 1.6}};
  for (int i = 0; i < r.caps_size(); ++i) {
    tallest = std::max(tallest, std::max(r.caps(i).step_ms(), r.caps(i).step_max_ms()));
    caps.push_back(plot::TickLabel(r.caps(i).bucket_cap_mb()));
    series.points.emplace_back(i, r.caps(i).step_ms());
  }
  const plot::Axes axes = PanelAxes(left, r.caps_size(), Top(tallest));
  plot::DrawCategoryAxes(svg, axes, caps, "bucket_cap_mb (0: one bucket per parameter)",
                         "milliseconds per step");
  plot::DrawSeries(svg, axes, series);
  for (int i = 0; i < r.caps_size(); ++i) {
    const CapPoint& p = r.caps(i);
    Whisker(svg, axes, axes.X(i), p.step_min_ms(), p.step_max_ms());
    svg.Rect(axes.X(i) - 3, axes.Y(p.step_ms()) - 3, 6, 6,
             {.stroke = "#ffffff", .width = 0.5, .fill = kStepColour},
             absl::StrFormat("cap %g MB: %d buckets, %.2f ms, %.2f ms exposed", p.bucket_cap_mb(),
                             p.buckets(), p.step_ms(), p.exposed_comm_ms()));
    svg.Text(axes.X(i), axes.Y(std::max(p.step_ms(), p.step_max_ms())) - 6,
             absl::StrFormat("%d", p.buckets()), 9, "middle", "#555555");
  }
  Title(svg, left, "2. Step time vs bucket size",
        "numbers: buckets after the rebuild (paper: 10-25 MB fastest)");
}

// 3. Time per micro-batch when only every K-th synchronises.
void SyncPanel(plot::Svg& svg, const BenchPaperReport& r, double left) {
  double tallest = 0;
  std::vector<std::string> ks;
  for (const SyncPoint& p : r.sync()) {
    tallest = std::max({tallest, p.iteration_ms(), p.iteration_max_ms()});
    ks.push_back(absl::StrFormat("K = %d", p.sync_every()));
  }
  const plot::Axes axes = PanelAxes(left, r.sync_size(), Top(tallest));
  plot::DrawCategoryAxes(svg, axes, ks, "allreduce every K-th micro-batch (no_sync between)",
                         "milliseconds per micro-batch");
  for (int i = 0; i < r.sync_size(); ++i) {
    const SyncPoint& p = r.sync(i);
    svg.Rect(axes.X(i) - 24, axes.Y(p.iteration_ms()), 48, axes.Y(0) - axes.Y(p.iteration_ms()),
             {.stroke = "#ffffff", .fill = i == 0 ? kReferenceColour : kStepColour},
             absl::StrFormat("K = %d: %.2f ms per micro-batch", p.sync_every(), p.iteration_ms()));
    Whisker(svg, axes, axes.X(i), p.iteration_min_ms(), p.iteration_max_ms());
    svg.Text(axes.X(i), axes.Y(std::max(p.iteration_ms(), p.iteration_max_ms())) - 6,
             absl::StrFormat("%.2fx", p.speedup()), 11, "middle");
  }
  Title(svg, left, "3. Skipping synchronisation",
        "speedup over synchronising every micro-batch (grey)");
}

}  // namespace

std::string PaperSvg(const BenchPaperReport& r) {
  plot::Svg svg(3 * kPanelWidth, kPanelHeight + 44);
  BreakdownPanel(svg, r, 0);
  CapPanel(svg, r, kPanelWidth);
  SyncPanel(svg, r, 2 * kPanelWidth);
  svg.Text(
      kLeft, kPanelHeight + 20,
      absl::StrFormat("ddpkit bench paper: %s, batch %d per rank, %d ranks (%s), %s", r.model(),
                      r.batch_size(), r.world_size(), r.backend(), r.thread_budget()),
      11, "start", "#555555");
  svg.Text(kLeft, kPanelHeight + 36,
           absl::StrFormat("bars and points: medians of %d steps, the slowest rank's; whiskers: "
                           "the fastest to the slowest step",
                           r.iters()),
           11, "start", "#555555");
  return svg.Finish();
}

}  // namespace ddpkit::jobs
