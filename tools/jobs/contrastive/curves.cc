#include "tools/jobs/contrastive/curves.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string_view>

#include "absl/strings/str_format.h"
#include "autograd/base/error.h"
#include "autograd/base/file_util.h"
#include "tools/plot/svg.h"

namespace ddpkit::jobs {
namespace {

// Two panels side by side (loss, accuracy) sharing the step axis, one legend under both.
constexpr double kPanelWidth = 400, kPanelHeight = 250, kLeft = 70, kTop = 40, kGap = 110;

bool IsReference(const TrainingCurve& c) { return c.layout().empty(); }

bool Is(const TrainingCurve& c, std::string_view layout, std::string_view gather) {
  return c.layout() == layout && c.gather() == gather;
}

// A run of every mode has ten curves, six of them exactly on the reference: drawn together,
// the story is lost. Such a run draws the naive gather (local + slice, the old GatherLayer)
// against the fix (local + sum, reduce-scatter backward) and the reference; a run of at most
// kAllCurvesUpTo chosen modes (--gather slice,avg) draws them all.
constexpr int kAllCurvesUpTo = 4;

std::vector<int> Drawn(const ContrastiveReport& report) {
  std::vector<int> modes, story;
  for (int i = 0; i < report.training_size(); ++i) {
    const TrainingCurve& c = report.training(i);
    if (IsReference(c)) continue;
    modes.push_back(i);
    if (Is(c, "local", "slice") || Is(c, "local", "sum")) story.push_back(i);
  }
  if (static_cast<int>(modes.size()) <= kAllCurvesUpTo || story.size() != 2) return modes;
  return story;
}

// A gather mode keeps its colour in every picture (the naive slice red, the fix sum blue); where
// both layouts are drawn, the global one is dashed. The exact modes are wide pale lines, so that
// one on the reference (black, dashed, drawn last) reads as both at once.
plot::Style StyleOf(const TrainingCurve& c, bool both_layouts) {
  if (IsReference(c)) return {.stroke = "#000000", .width = 1.8, .dash = "7 4"};
  struct Look {
    std::string_view gather, colour;
    bool exact;
  };
  static constexpr Look kLooks[] = {{"sum", "#4e79a7", true},
                                    {"allreduce_slice", "#76b7b2", true},
                                    {"slice", "#e15759", false},
                                    {"none", "#9c755f", false},
                                    {"avg", "#b07aa1", false}};
  plot::Style style{.stroke = "#555555", .width = 1.6};
  for (const Look& look : kLooks) {
    if (c.gather() != look.gather) continue;
    style.stroke = std::string(look.colour);
    if (look.exact) style = {.stroke = style.stroke, .width = 5, .opacity = 0.55};
  }
  if (both_layouts && c.layout() == "global" && style.width < 5) style.dash = "4 2";
  return style;
}

std::string CurveName(const TrainingCurve& c) {
  if (IsReference(c)) return "one process, whole batch (reference)";
  if (Is(c, "local", "sum")) return "local + sum: the fix (reduce-scatter backward)";
  if (Is(c, "local", "slice")) return "local + slice: the naive GatherLayer";
  return StrCat(c.layout(), " + ", c.gather());
}

bool BothLayouts(const ContrastiveReport& report) {
  bool local = false, global = false;
  for (int i : Drawn(report)) {
    local |= report.training(i).layout() == "local";
    global |= report.training(i).layout() == "global";
  }
  return local && global;
}

// The order to draw in: the chosen variants, then the reference.
std::vector<int> DrawOrder(const ContrastiveReport& report) {
  std::vector<int> order = Drawn(report);
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
  const bool both_layouts = BothLayouts(report);
  for (int i : DrawOrder(report)) {
    plot::Series series =
        loss ? LossSeries(report.training(i)) : AccuracySeries(report.training(i));
    series.style = StyleOf(report.training(i), both_layouts);
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
  std::vector<double> loss_ticks = plot::NiceTicks(0, max_loss > 0 ? max_loss : 1, 5);
  if (loss_ticks.size() > 1 && loss_ticks.back() < max_loss) {  // room for the tallest spike
    loss_ticks.push_back(2 * loss_ticks.back() - loss_ticks[loss_ticks.size() - 2]);
  }
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
  const bool both_layouts = BothLayouts(report);
  for (int i : DrawOrder(report)) {
    legend.push_back({.label = CurveName(report.training(i)),
                      .style = StyleOf(report.training(i), both_layouts)});
  }
  const int columns = 2;
  const double legend_rows = std::ceil(legend.size() / static_cast<double>(columns));
  const int hidden = report.training_size() - static_cast<int>(legend.size());
  plot::Svg svg(2 * kLeft + 2 * kPanelWidth + kGap,
                kTop + kPanelHeight + 60 + 18 * legend_rows + (hidden > 0 ? 20 : 0));
  const std::string setup = StrCat(" (", report.world_size(), " ranks, ", report.optimizer(), ")");
  Panel(svg, report, loss, "global loss" + setup, "loss", true);
  Panel(svg, report, accuracy, "held-out top-1 retrieval" + setup, "accuracy", false);
  const double legend_height = plot::DrawLegend(svg, kLeft, kTop + kPanelHeight + 56, legend,
                                                columns, (2 * kPanelWidth + kGap) / columns);
  if (hidden > 0) {
    svg.Text(kLeft, kTop + kPanelHeight + 56 + legend_height + 14,
             absl::StrFormat("the run's %d other modes are in curves.csv and the printed table; "
                             "--gather slice,avg (a list) draws the modes you choose",
                             hidden),
             11, "start", "#555555");
  }
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
