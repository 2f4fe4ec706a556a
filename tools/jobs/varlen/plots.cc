#include "tools/jobs/varlen/plots.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "autograd/base/error.h"
#include "autograd/base/file_util.h"
#include "tools/plot/svg.h"

namespace ddpkit::jobs {
namespace {

// Row 1: per-rank tokens before | after. Row 2: imbalance | LR schedule | loss per epoch.
constexpr double kLeft = 70, kTop = 56, kWide = 420, kWideGap = 100, kHeight = 200;
constexpr double kNarrow = 250, kNarrowGap = 100, kRowGap = 130;

// The layouts drawn: the trained batching's three orderings.
std::vector<const LayoutReport*> TrainedBatching(const VarlenReport& report) {
  std::string batching;
  for (const LayoutReport& l : report.layouts()) {
    if (l.trained()) batching = l.batching();
  }
  std::vector<const LayoutReport*> layouts;
  for (const LayoutReport& l : report.layouts()) {
    if (l.batching() == batching) layouts.push_back(&l);
  }
  return layouts;
}

const LayoutReport* Named(const std::vector<const LayoutReport*>& layouts, std::string_view name) {
  for (const LayoutReport* l : layouts) {
    if (l->name() == name) return l;
  }
  return nullptr;
}

double MostPadded(const std::vector<const LayoutReport*>& layouts) {
  int64_t most = 1;
  for (const LayoutReport* l : layouts) {
    for (const RankSeries& s : l->padded_per_step()) {
      for (int64_t v : s.values()) most = std::max(most, v);
    }
  }
  return static_cast<double>(most);
}

double MostSteps(const std::vector<const LayoutReport*>& layouts) {
  int64_t most = 1;
  for (const LayoutReport* l : layouts) most = std::max(most, l->steps());
  return static_cast<double>(most);
}

// An axis top that covers `most` on round ticks.
double TopOf(double lo, double most) {
  const std::vector<double> ticks = plot::NiceTicks(lo, most > lo ? most : lo + 1, 5);
  return std::max(ticks.back(), most);
}

void Title(plot::Svg& svg, const plot::Axes& axes, const std::string& title,
           const std::string& subtitle = "") {
  svg.Text(axes.x, axes.y - (subtitle.empty() ? 12 : 26), title, 13, "start", "#222222", true);
  if (!subtitle.empty()) svg.Text(axes.x, axes.y - 10, subtitle, 11, "start", "#555555");
}

// The two parts of a step's bar: the mean rank's padded tokens (the work), and the busiest
// rank's excess over it (what every other rank waits for).
constexpr char kWorkColour[] = "#bab0ac", kWaitColour[] = "#e15759";
constexpr char kLineColour[] = "#444444";  // single-series panels: the LR, the loss

// One bar per step: the mean rank's padded tokens, and above it the busiest rank's excess.
void TokensPanel(plot::Svg& svg, const plot::Axes& axes, const LayoutReport& layout,
                 const std::string& title) {
  Title(svg, axes, title,
        absl::StrFormat("busiest ÷ mean rank %.3f per step, sync cost %.3f; batches per rank %s",
                        layout.mean_imbalance(), layout.sync_cost(),
                        absl::StrJoin(layout.batches_per_rank(), " ")));
  plot::DrawAxes(svg, axes, "step", "padded tokens");
  const int ranks = layout.padded_per_step_size();
  const double width = 0.7 * (axes.X(1) - axes.X(0));
  for (int64_t t = 0; t < layout.steps(); ++t) {
    double most = 0, sum = 0;
    for (int r = 0; r < ranks; ++r) {
      const double v = static_cast<double>(layout.padded_per_step(r).values(t));
      most = std::max(most, v);
      sum += v;
    }
    const double mean = sum / std::max(1, ranks);
    const double x = axes.X(static_cast<double>(t)) - width / 2;
    svg.Rect(x, axes.Y(mean), width, axes.Y(0) - axes.Y(mean),
             {.stroke = "none", .fill = kWorkColour},
             absl::StrFormat("step %d: the mean rank's %.0f padded tokens", t, mean));
    svg.Rect(x, axes.Y(most), width, axes.Y(mean) - axes.Y(most),
             {.stroke = "none", .fill = kWaitColour},
             absl::StrFormat("step %d: the busiest rank's %.0f, %.0f more than the mean", t, most,
                             most - mean));
  }
}

// The orderings' lines: the last (sorted globally, on 1.0 nearly everywhere) is drawn last and
// widest, so that the axis and the others do not hide it.
plot::Style OrderStyle(int i) {
  static constexpr const char* kColours[] = {"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1"};
  return {.stroke = kColours[i % 4], .width = i == 2 ? 3.0 : 1.6};
}

void ImbalancePanel(plot::Svg& svg, const plot::Axes& axes,
                    const std::vector<const LayoutReport*>& layouts) {
  Title(svg, axes, "busiest rank ÷ mean rank, per step");
  plot::DrawAxes(svg, axes, "step", "max ÷ mean");
  for (size_t i = 0; i < layouts.size(); ++i) {
    plot::Series series{.label = layouts[i]->name(), .style = OrderStyle(static_cast<int>(i))};
    const int ranks = layouts[i]->padded_per_step_size();
    for (int64_t t = 0; t < layouts[i]->steps(); ++t) {
      double most = 0, sum = 0;
      for (int r = 0; r < ranks; ++r) {
        const double v = static_cast<double>(layouts[i]->padded_per_step(r).values(t));
        most = std::max(most, v);
        sum += v;
      }
      series.points.emplace_back(t, sum > 0 ? most / (sum / ranks) : 1);
    }
    plot::DrawSeries(svg, axes, series);
  }
}

// The first epoch's LR per step (every epoch repeats it).
void SchedulePanel(plot::Svg& svg, const plot::Axes& axes, const VarlenReport& report) {
  Title(svg, axes, absl::StrFormat("LR per step (%s scaling)", report.lr_scaling()),
        absl::StrFormat("%g for a global batch of %d", report.lr(), report.ref_batch_size()));
  plot::DrawAxes(svg, axes, "step (each epoch)", "LR");
  plot::Series lr{.label = "LR", .style = {.stroke = kLineColour, .width = 1.6}};
  for (const StepReport& s : report.steps()) {
    if (s.epoch() == 0) lr.points.emplace_back(s.step(), s.lr());
  }
  plot::DrawSeries(svg, axes, lr);
}

std::vector<double> LossPerEpoch(const VarlenReport& report) {
  std::vector<double> sums(report.epochs()), samples(report.epochs());
  for (const StepReport& s : report.steps()) {
    sums[s.epoch()] += s.loss() * static_cast<double>(s.global_batch());
    samples[s.epoch()] += static_cast<double>(s.global_batch());
  }
  for (size_t e = 0; e < sums.size(); ++e) sums[e] = samples[e] > 0 ? sums[e] / samples[e] : 0;
  return sums;
}

void LossPanel(plot::Svg& svg, const plot::Axes& axes, const std::vector<double>& losses,
               const VarlenReport& report) {
  Title(svg, axes, "training loss",
        absl::StrFormat("mean per epoch; final accuracy %.1f%%", 100 * report.final_accuracy()));
  plot::DrawAxes(svg, axes, "epoch", "loss");
  plot::Series loss{.label = "loss", .style = {.stroke = kLineColour, .width = 1.6}};
  for (size_t e = 0; e < losses.size(); ++e) loss.points.emplace_back(e + 1, losses[e]);
  plot::DrawSeries(svg, axes, loss);
}

}  // namespace

std::string ImbalanceSvg(const VarlenReport& report) {
  const std::vector<const LayoutReport*> layouts = TrainedBatching(report);
  const LayoutReport* before = Named(layouts, "sorted per rank");
  const LayoutReport* after = Named(layouts, "sorted globally");
  DDPKIT_CHECK(before != nullptr && after != nullptr, "[varlen plots] the report lacks a layout");
  const plot::Axes before_axes{.x = kLeft,
                               .y = kTop,
                               .width = kWide,
                               .height = kHeight,
                               .x_min = -0.5,
                               .x_max = MostSteps({before, after}) - 0.5,
                               .y_min = 0,
                               .y_max = TopOf(0, MostPadded({before, after}))};
  plot::Axes after_axes = before_axes;
  after_axes.x += kWide + kWideGap;

  const double row2 = kTop + kHeight + kRowGap;
  double worst = 1;
  for (const LayoutReport* l : layouts) worst = std::max(worst, l->worst_imbalance());
  const plot::Axes imbalance_axes{.x = kLeft,
                                  .y = row2,
                                  .width = kNarrow,
                                  .height = kHeight,
                                  .x_min = 0,
                                  .x_max = MostSteps(layouts),
                                  .y_min = 1,
                                  .y_max = TopOf(1, worst)};
  double max_lr = 0;
  for (const StepReport& s : report.steps()) max_lr = std::max(max_lr, s.lr());
  plot::Axes schedule_axes = imbalance_axes;
  schedule_axes.x += kNarrow + kNarrowGap;
  schedule_axes.x_max = static_cast<double>(std::max<int64_t>(1, after->steps() - 1));
  schedule_axes.y_min = 0;
  schedule_axes.y_max = TopOf(0, max_lr);
  const std::vector<double> losses = LossPerEpoch(report);
  plot::Axes loss_axes = schedule_axes;
  loss_axes.x += kNarrow + kNarrowGap;
  loss_axes.x_min = 1;
  loss_axes.x_max = std::max(2.0, static_cast<double>(losses.size()));
  loss_axes.y_max = TopOf(0, losses.empty() ? 1 : *std::max_element(losses.begin(), losses.end()));

  plot::Svg svg(2 * kLeft + 2 * kWide + kWideGap, row2 + kHeight + 110);
  TokensPanel(svg, before_axes, *before, "before: the sampler's shares, each sorted per rank");
  TokensPanel(svg, after_axes, *after, "after: sorted globally, dealt round-robin");
  plot::DrawLegend(svg, kLeft, kTop + kHeight + 48,
                   {{.label = "the mean rank's padded tokens: the work",
                     .style = {.fill = kWorkColour},
                     .box = true},
                    {.label = "the busiest rank's excess: what every other rank waits for",
                     .style = {.fill = kWaitColour},
                     .box = true}},
                   2, kWide + kWideGap);
  ImbalancePanel(svg, imbalance_axes, layouts);
  std::vector<plot::LegendEntry> entries;
  for (size_t i = 0; i < layouts.size(); ++i) {
    entries.push_back({.label = layouts[i]->name(), .style = OrderStyle(static_cast<int>(i))});
  }
  plot::DrawLegend(svg, kLeft, row2 + kHeight + 48, entries, 1, 150);
  SchedulePanel(svg, schedule_axes, report);
  LossPanel(svg, loss_axes, losses, report);
  svg.Text(schedule_axes.x, svg.height() - 12,
           StrCat(report.world_size(), " ranks, ", report.samples(), " samples of ",
                  report.shortest(), "-", report.longest(), " tokens; batches of ",
                  before->batching(), "; ", report.order(), " order"),
           11, "start", "#555555");
  return svg.Finish();
}

std::string StepsCsv(const VarlenReport& report) {
  std::string out = "step,global_batch,longest,lr,loss";
  for (int r = 0; r < report.world_size(); ++r) absl::StrAppend(&out, ",batch_rank", r);
  out += "\n";
  for (const StepReport& s : report.steps()) {
    absl::StrAppendFormat(&out, "%d,%d,%d,%.8g,%.8f,%s\n", s.step(), s.global_batch(), s.longest(),
                          s.lr(), s.loss(), absl::StrJoin(s.batch_sizes(), ","));
  }
  return out;
}

absl::Status WriteVarlenPlots(const VarlenReport& report, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        StrCat("cannot create --out directory '", dir, "': ", ec.message()));
  }
  DDPKIT_RETURN_IF_ERROR(WriteFileAtomically(dir + "/steps.csv", StepsCsv(report)));
  return WriteFileAtomically(dir + "/imbalance.svg", ImbalanceSvg(report));
}

}  // namespace ddpkit::jobs
