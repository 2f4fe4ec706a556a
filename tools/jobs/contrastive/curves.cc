#include "tools/jobs/contrastive/curves.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/str_format.h"
#include "autograd/error.h"
#include "autograd/file_util.h"

namespace ddpkit::jobs {
namespace {

// Layout in pixels: two panels side by side, each a plot area with a margin for its labels.
constexpr double kPanelW = 460, kPanelH = 300, kLeft = 50, kTop = 30, kPlotW = 380, kPlotH = 220;
constexpr const char* kColours[] = {"#000000", "#1f77b4", "#ff7f0e", "#2ca02c",
                                    "#d62728", "#9467bd", "#8c564b", "#e377c2",
                                    "#7f7f7f", "#bcbd22", "#17becf"};
constexpr int kNumColours = 11;

std::string CurveName(const TrainingCurve& c) {
  return c.layout().empty() ? c.gather() : StrCat(c.layout(), " + ", c.gather());
}

// One run's line in a panel (0: loss per step, 1: accuracy per evaluation, from (0, 0)).
std::string Polyline(const TrainingCurve& c, int index, int panel, double y_max, int steps) {
  const double x0 = panel * kPanelW + kLeft, y0 = kTop;
  std::string points;
  auto point = [&](int step, double v) {
    if (!std::isfinite(v)) return;
    v = std::clamp(v, 0.0, y_max);
    absl::StrAppendFormat(&points, "%.1f,%.1f ", x0 + kPlotW * step / steps,
                          y0 + kPlotH * (1 - v / y_max));
  };
  if (panel == 0) {
    for (int s = 0; s < c.losses_size(); ++s) point(s + 1, c.losses(s));
  } else {
    point(0, 0);
    for (int e = 0; e < c.eval_steps_size(); ++e) point(c.eval_steps(e), c.accuracy(e));
  }
  return absl::StrFormat(
      "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%g\" points=\"%s\"/>\n",
      kColours[index % kNumColours], index == 0 ? 2.5 : 1.5, points);
}

// A panel's title, frame, axis labels and every run's line.
std::string Panel(const ContrastiveReport& report, int panel, double y_max, int steps) {
  const double x0 = panel * kPanelW + kLeft, y0 = kTop;
  std::string out = absl::StrFormat(
      "<text x=\"%g\" y=\"18\" font-size=\"13\">%s (%d ranks, %s)</text>\n"
      "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#999\"/>\n"
      "<text x=\"%g\" y=\"%g\">%.3g</text><text x=\"%g\" y=\"%g\">0</text>\n"
      "<text x=\"%g\" y=\"%g\">step %d</text>\n",
      x0, panel == 0 ? "global loss" : "held-out top-1 accuracy", report.world_size(),
      report.optimizer(), x0, y0, kPlotW, kPlotH, x0 - 40, y0 + 10, y_max, x0 - 12, y0 + kPlotH,
      x0 + kPlotW - 50, y0 + kPlotH + 14, steps);
  for (int i = 0; i < report.training_size(); ++i) {
    out += Polyline(report.training(i), i, panel, y_max, steps);
  }
  return out;
}

// Two columns of swatches under the panels.
std::string Legend(const ContrastiveReport& report) {
  std::string out;
  for (int i = 0; i < report.training_size(); ++i) {
    const double x = kLeft + (i % 2) * kPanelW, y = kTop + kPlotH + 40 + 18 * (i / 2);
    absl::StrAppendFormat(
        &out,
        "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" stroke-width=\"3\"/>"
        "<text x=\"%g\" y=\"%g\">%s</text>\n",
        x, y - 4, x + 24, y - 4, kColours[i % kNumColours], x + 30, y,
        CurveName(report.training(i)));
  }
  return out;
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
  if (max_loss <= 0) max_loss = 1;
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"sans-serif\" "
      "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      static_cast<int>(2 * kPanelW),
      static_cast<int>(kPanelH + 20 * report.training_size() / 2 + 40));
  out += Panel(report, 0, max_loss, steps);
  out += Panel(report, 1, 1.0, steps);
  out += Legend(report);
  out += "</svg>\n";
  return out;
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
