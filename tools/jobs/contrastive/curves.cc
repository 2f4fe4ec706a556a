#include "tools/jobs/contrastive/curves.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/str_format.h"
#include "autograd/base/error.h"
#include "autograd/base/file_util.h"
#include "tools/plot/svg.h"

namespace ddpkit::jobs {
namespace {

// Two panels side by side (loss, accuracy) sharing the step axis, one legend under both.
constexpr double kPanelWidth = 400, kPanelHeight = 250, kLeft = 70, kTop = 40, kGap = 110;

std::string CurveName(const TrainingCurve& c) {
  return c.layout().empty() ? "one process, whole batch (reference)"
                            : StrCat(c.layout(), " + ", c.gather());
}

bool IsReference(const TrainingCurve& c) { return c.layout().empty(); }

// The single-process reference is black and dashed, and drawn last so it stays visible when
// the exact variants lie on top of it.
plot::Style StyleOf(const ContrastiveReport& report, int i) {
  if (IsReference(report.training(i))) {
    return {.stroke = "#000000", .width = 2.2, .dash = "7 4"};
  }
  int colour = 0;
  for (int j = 0; j < i; ++j) colour += IsReference(report.training(j)) ? 0 : 1;
  return plot::SeriesStyle(colour);
}

// The order to draw in: every variant, then the reference.
std::vector<int> DrawOrder(const ContrastiveReport& report) {
  std::vector<int> order;
  for (int i = 0; i < report.training_size(); ++i) {
    if (!IsReference(report.training(i))) order.push_back(i);
  }
  for (int i = 0; i < report.training_size(); ++i) {
    if (IsReference(report.training(i))) order.push_back(i);
  }
  return order;
}

plot::Series LossSeries(const TrainingCurve& c) {
  plot::Series s{.label = CurveName(c)};
  for (int step = 0; step < c.losses_size(); ++step)
    s.points.emplace_back(step + 1, c.losses(step));
  return s;
}

plot::Series AccuracySeries(const TrainingCurve& c) {
  plot::Series s{.label = CurveName(c), .points = {{0, 0}}};
  for (int e = 0; e < c.eval_steps_size(); ++e)
    s.points.emplace_back(c.eval_steps(e), c.accuracy(e));
  return s;
}

void Panel(plot::Svg& svg, const ContrastiveReport& report, const plot::Axes& axes,
           const std::string& title, const std::string& y_label, bool loss) {
  svg.Text(axes.x, axes.y - 12, title, 13, "start", "#222222", true);
  plot::DrawAxes(svg, axes, "step", y_label);
  for (int i : DrawOrder(report)) {
    plot::Series series =
        loss ? LossSeries(report.training(i)) : AccuracySeries(report.training(i));
    series.style = StyleOf(report, i);
    plot::DrawSeries(svg, axes, series);
  }
}

}  // namespace

std::string CurvesCsv(const ContrastiveReport& report) {
  std::string out = "step,layout,gather,loss,accuracy\n";
  for (const TrainingCurve& c : report.training()) {
    int e = 0;
    for (int step = 1; step <= c.losses_size(); ++step) {
      std::string accuracy;
      if (e < c.eval_steps_size() && c.eval_steps(e) == step) {
        accuracy = absl::StrFormat("%.6f", c.accuracy(e++));
      }
      absl::StrAppendFormat(&out, "%d,%s,%s,%.8f,%s\n", step, c.layout(), c.gather(),
                            c.losses(step - 1), accuracy);
    }
  }
  return out;
}

std::string CurvesSvg(const ContrastiveReport& report) {
  double max_loss = 0;
  int steps = 1;
  for (const TrainingCurve& c : report.training()) {
    for (double l : c.losses()) {
      if (std::isfinite(l)) max_loss = std::max(max_loss, l);
    }
    steps = std::max(steps, c.losses_size());
  }
  const std::vector<double> loss_ticks = plot::NiceTicks(0, max_loss > 0 ? max_loss : 1, 5);
  const plot::Axes loss{.x = kLeft,
                        .y = kTop,
                        .width = kPanelWidth,
                        .height = kPanelHeight,
                        .x_min = 0,
                        .x_max = static_cast<double>(steps),
                        .y_min = 0,
                        .y_max = loss_ticks.back()};
  plot::Axes accuracy = loss;
  accuracy.x = kLeft + kPanelWidth + kGap;
  accuracy.y_max = 1;
  std::vector<plot::LegendEntry> legend;
  for (int i : DrawOrder(report)) {
    legend.push_back({.label = CurveName(report.training(i)), .style = StyleOf(report, i)});
  }
  const int columns = 4;
  const double legend_rows = std::ceil(legend.size() / static_cast<double>(columns));
  plot::Svg svg(2 * kLeft + 2 * kPanelWidth + kGap, kTop + kPanelHeight + 60 + 18 * legend_rows);
  const std::string setup = StrCat(" (", report.world_size(), " ranks, ", report.optimizer(), ")");
  Panel(svg, report, loss, "global loss" + setup, "loss", true);
  Panel(svg, report, accuracy, "held-out top-1 retrieval" + setup, "accuracy", false);
  plot::DrawLegend(svg, kLeft, kTop + kPanelHeight + 56, legend, columns,
                   (2 * kPanelWidth + kGap) / columns);
  return svg.Finish();
}

absl::Status WriteCurves(const ContrastiveReport& report, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        StrCat("cannot create --out directory '", dir, "': ", ec.message()));
  }
  DDPKIT_RETURN_IF_ERROR(WriteFileAtomically(dir + "/curves.csv", CurvesCsv(report)));
  return WriteFileAtomically(dir + "/curves.svg", CurvesSvg(report));
}

}  // namespace ddpkit::jobs
