#include "tools/trace/timeline.h"

#include <algorithm>
#include <limits>
#include <set>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "autograd/base/error.h"
#include "tools/plot/svg.h"
#include "tools/trace/stats.h"

namespace ddpkit::trace {
namespace {

constexpr double kLeft = 110, kRight = 20, kTop = 52, kComputeLane = 28, kCommLane = 20, kStrip = 5,
                 kRankGap = 22;

// Phases in quiet blues, greys and green; buckets in warm colours, so a bucket's hooks and its
// collective read as one thing.
std::string PhaseColour(const std::string& phase) {
  if (phase == "forward") return "#c6dbef";
  if (phase == "backward") return "#6baed6";
  if (phase == "finalize") return "#d9d9d9";
  if (phase == "optimizer") return "#e5d8bd";      // not green: green is overlap
  if (phase == "unused search") return "#08519c";  // inside forward: a dark blue mark
  return "#eeeeee";                                // shadow
}

// No red, green or pink: red marks exposed communication and green overlapped, under the lane;
// no light blue: the compute lane's forward and backward.
constexpr int kBucketColours = 12;

const std::string& BucketColour(int bucket) {
  static const std::vector<std::string> kColours = {"#f28e2b", "#9467bd", "#edc948", "#8c564b",
                                                    "#76b7b2", "#393b79", "#bcbd22", "#c49c94",
                                                    "#17becf", "#7b4173", "#8c6d31", "#6b6ecf"};
  static const std::string kOther = "#9e9e9e";
  return bucket < 0 ? kOther : kColours[static_cast<size_t>(bucket) % kColours.size()];
}

bool InRange(const TraceItem& item, const TimelineOptions& o) {
  return item.iteration >= o.first_iteration && item.iteration < o.end_iteration;
}

struct Window {
  double start = std::numeric_limits<double>::max(), end = 0;
};

Window WindowOf(const TraceView& view, const TimelineOptions& o) {
  Window w;
  for (const RankView& rank : view.ranks) {
    for (const TraceItem& p : rank.phases) {
      if (!InRange(p, o)) continue;
      w.start = std::min(w.start, p.start_us);
      w.end = std::max(w.end, p.end_us);
    }
  }
  return w;
}

std::string Ms(double us) { return absl::StrFormat("%.3f ms", us / 1000); }

void DrawCompute(plot::Svg& svg, const plot::Axes& axes, const RankView& rank,
                 const TimelineOptions& o, double y) {
  for (const TraceItem& p : rank.phases) {
    if (!InRange(p, o)) continue;
    plot::Style style{.stroke = "#ffffff", .width = 0.5, .fill = PhaseColour(p.name)};
    if (p.name == "shadow") style.stroke = "#777777", style.dash = "3 2";
    const double x = axes.X(p.start_us), w = axes.X(p.end_us) - x;
    svg.Rect(
        x, y, w, kComputeLane, style,
        absl::StrFormat("%s, iteration %d: %s", p.name, p.iteration, Ms(p.end_us - p.start_us)));
    if (w > 46) svg.Text(x + 3, y + kComputeLane - 5, p.name, 9, "start", "#1b3a57");
  }
  for (const TraceItem& h : rank.hooks) {
    if (!InRange(h, o)) continue;
    svg.Line(axes.X(h.start_us), y, axes.X(h.start_us), y + 11,
             {.stroke = BucketColour(h.bucket), .width = 1.6},
             absl::StrFormat("hook %s (parameter %d, bucket %d)", h.name, h.param, h.bucket));
  }
  for (const TraceItem& i : rank.instants) {
    if (!InRange(i, o) || (i.name != "rebuild" && i.name != "no_sync")) continue;
    svg.Line(axes.X(i.start_us), y - 3, axes.X(i.start_us), y + kComputeLane + 3,
             {.stroke = "#333333", .width = 1, .dash = "2 2"}, i.name);
    svg.Text(axes.X(i.start_us) + 2, y - 4, i.name, 9, "start", "#333333");
  }
}

// Each drawn collective's row in the comm lane, and how many rows the rank needs: collectives
// that run at once (round-robin process groups; PyTorch's Gloo, two on its worker threads) would
// hide each other in one row, so each takes the first row free at its start (-1: not drawn).
struct CommRows {
  std::vector<int> row;
  int rows = 1;
};

CommRows RowsOf(const RankView& rank, const TimelineOptions& o) {
  CommRows out{.row = std::vector<int>(rank.collectives.size(), -1)};
  std::vector<size_t> order;
  for (size_t i = 0; i < rank.collectives.size(); ++i) {
    if (InRange(rank.collectives[i], o)) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return rank.collectives[a].start_us < rank.collectives[b].start_us;
  });
  std::vector<double> busy_until;  // per row
  for (size_t i : order) {
    const TraceItem& c = rank.collectives[i];
    size_t r = 0;
    while (r < busy_until.size() && busy_until[r] > c.start_us) ++r;
    if (r == busy_until.size()) busy_until.push_back(c.end_us);
    busy_until[r] = std::max(c.start_us, c.end_us);
    out.row[i] = static_cast<int>(r);
  }
  out.rows = std::max<int>(1, static_cast<int>(busy_until.size()));
  return out;
}

// The collectives, a row per collective at once, and under them the strip: overlap green,
// exposed red.
void DrawComm(plot::Svg& svg, const plot::Axes& axes, const RankView& rank,
              const TimelineOptions& o, const CommRows& rows, double y) {
  Intervals compute, comm;
  for (const TraceItem& p : rank.phases) {
    if (InRange(p, o) && (p.name == "forward" || p.name == "backward" || p.name == "optimizer")) {
      compute.emplace_back(p.start_us, p.end_us);
    }
  }
  for (size_t i = 0; i < rank.collectives.size(); ++i) {
    const TraceItem& c = rank.collectives[i];
    if (rows.row[i] < 0) continue;
    comm.emplace_back(c.start_us, c.end_us);
    const int bucket = c.purpose == "bucket" ? c.bucket : -1;
    plot::Style style{.stroke = "#ffffff", .width = 0.5, .fill = BucketColour(bucket)};
    if (c.shadow) style.opacity = 0.55;
    const double x = axes.X(c.start_us);
    svg.Rect(x, y + kCommLane * rows.row[i], std::max(1.0, axes.X(c.end_us) - x), kCommLane, style,
             absl::StrFormat("%s%s, seq %d, %d bytes: %s", c.name, c.shadow ? " (shadow)" : "",
                             c.seq, c.bytes, Ms(c.end_us - c.start_us)));
  }
  compute = MergeIntervals(std::move(compute));
  y += kCommLane * (rows.rows - 1);  // the strip under the last row
  for (const auto& [a, b] : MergeIntervals(std::move(comm))) {
    svg.Rect(axes.X(a), y + kCommLane + 1, axes.X(b) - axes.X(a), kStrip,
             {.stroke = "none", .width = 0, .fill = "#d62728"});
    for (const auto& [c, d] : compute) {
      const double lo = std::max(a, c), hi = std::min(b, d);
      if (hi > lo) {
        svg.Rect(axes.X(lo), y + kCommLane + 1, axes.X(hi) - axes.X(lo), kStrip,
                 {.stroke = "none", .width = 0, .fill = "#2ca02c"});
      }
    }
  }
}

// A dotted line and a label where each iteration starts (on rank 0's lanes' top).
void DrawIterationMarks(plot::Svg& svg, const plot::Axes& axes, const TraceView& view,
                        const TimelineOptions& o) {
  std::set<int> seen;
  for (const RankView& rank : view.ranks) {
    for (const TraceItem& p : rank.phases) {
      if (!InRange(p, o) || p.name != "forward" || !seen.insert(p.iteration).second) continue;
      svg.Line(axes.X(p.start_us), axes.y - 6, axes.X(p.start_us), axes.y + axes.height,
               {.stroke = "#999999", .width = 0.8, .dash = "1 3"});
      svg.Text(axes.X(p.start_us) + 3, axes.y - 8, StrCat("iteration ", p.iteration), 10, "start",
               "#555555");
    }
  }
}

int MaxBucket(const TraceView& view, const TimelineOptions& o) {
  int most = -1;
  for (const RankView& rank : view.ranks) {
    for (const TraceItem& c : rank.collectives) {
      if (InRange(c, o) && c.purpose == "bucket") most = std::max(most, c.bucket);
    }
  }
  return most;
}

double DrawTimelineLegend(plot::Svg& svg, double y, int buckets) {
  std::vector<plot::LegendEntry> entries;
  for (const char* phase : {"forward", "backward", "finalize", "optimizer"}) {
    entries.push_back({.label = phase,
                       .style = {.stroke = "#ffffff", .width = 0.5, .fill = PhaseColour(phase)},
                       .box = true});
  }
  // Past the palette's twelve, colours repeat: the legend then names every bucket of a colour.
  const int colours = std::min(buckets + 1, kBucketColours);
  for (int c = 0; c < colours; ++c) {
    std::vector<int> same;
    for (int b = c; b <= buckets; b += kBucketColours) same.push_back(b);
    entries.push_back(
        {.label = same.size() == 1
                      ? StrCat("bucket ", c, ": its hooks (ticks) and allreduce")
                      : StrCat("buckets ", absl::StrJoin(same, ", "), ": hooks and allreduces"),
         .style = {.stroke = "#ffffff", .width = 0.5, .fill = BucketColour(c)},
         .box = true});
  }
  entries.push_back({.label = "other collective (used map, plan, join, ...)",
                     .style = {.stroke = "#ffffff", .width = 0.5, .fill = BucketColour(-1)},
                     .box = true});
  entries.push_back({.label = "communication overlapped by compute",
                     .style = {.stroke = "none", .width = 0, .fill = "#2ca02c"},
                     .box = true});
  entries.push_back({.label = "communication exposed",
                     .style = {.stroke = "none", .width = 0, .fill = "#d62728"},
                     .box = true});
  return plot::DrawLegend(svg, kLeft, y, entries, 3, 330);
}

}  // namespace

double TimelineSpanMs(const TraceView& view, const TimelineOptions& options) {
  const Window window = WindowOf(view, options);
  return window.end > window.start ? (window.end - window.start) / 1000 : 0;
}

absl::StatusOr<std::string> TimelineSvg(const TraceView& view, const TimelineOptions& o) {
  Window window = WindowOf(view, o);
  if (!(window.end > window.start)) {
    return absl::InvalidArgumentError(StrCat("the trace has no phase in iterations ",
                                             o.first_iteration, ":", o.end_iteration,
                                             " (pick a range with --iterations A:B)"));
  }
  std::vector<CommRows> rows;
  double lanes_height = 0;
  for (const RankView& rank : view.ranks) {
    rows.push_back(RowsOf(rank, o));
    lanes_height += kComputeLane + kCommLane * rows.back().rows + kStrip + kRankGap + 4;
  }
  if (o.span_ms > 0) window.end = window.start + o.span_ms * 1000;
  const int buckets = MaxBucket(view, o);
  // The legend: 4 phases, buckets 0..buckets, 3 communication kinds; 3 to a row.
  const double legend_rows = std::ceil((4 + (buckets + 1) + 3) / 3.0);
  plot::Svg svg(o.width, kTop + lanes_height + 50 + 18 * legend_rows + 10);
  // The time axis in milliseconds from the window's start.
  const double span_ms = (window.end - window.start) / 1000;
  const plot::Axes axes{.x = kLeft,
                        .y = kTop,
                        .width = o.width - kLeft - kRight,
                        .height = lanes_height,
                        .x_min = 0,
                        .x_max = span_ms};
  plot::Axes us = axes;  // the same area, in the trace's microseconds
  us.x_min = window.start, us.x_max = window.end;
  // The title names the iterations drawn, not those asked for past the trace's end.
  int last = o.first_iteration;
  for (const RankView& rank : view.ranks) {
    for (const TraceItem& p : rank.phases) {
      if (InRange(p, o)) last = std::max(last, p.iteration);
    }
  }
  const std::string title =
      absl::StrFormat("ddpkit %s: %d rank(s), %s; iterations %d to %d", view.job, view.world_size,
                      view.backend, o.first_iteration, last);
  // A long backend description (simulate's network) shrinks the title to fit rather than run
  // past the picture's edge: a bold character is about 0.62 of the font size wide.
  const double fits = (o.width - kLeft - kRight) / (0.62 * static_cast<double>(title.size()));
  svg.Text(kLeft, 20, title, std::clamp(fits, 8.0, 14.0), "start", "#222222", true);
  plot::DrawAxes(svg, axes, "milliseconds from the first iteration's start", "");
  DrawIterationMarks(svg, us, view, o);
  double y = kTop + 8;
  for (size_t r = 0; r < view.ranks.size(); ++r) {
    const RankView& rank = view.ranks[r];
    svg.Text(10, y + 12, StrCat("rank ", rank.rank), 12, "start", "#222222", true);
    svg.Text(kLeft - 8, y + kComputeLane / 2 + 4, "compute", 10, "end", "#555555");
    for (int row = 0; row < rows[r].rows; ++row) {
      svg.Text(kLeft - 8, y + kComputeLane + 2 + kCommLane * row + kCommLane / 2 + 4,
               rows[r].rows == 1 ? std::string("comm") : StrCat("comm ", row + 1), 10, "end",
               "#555555");
    }
    DrawCompute(svg, us, rank, o, y);
    DrawComm(svg, us, rank, o, rows[r], y + kComputeLane + 2);
    y += kComputeLane + kCommLane * rows[r].rows + kStrip + kRankGap + 4;
  }
  DrawTimelineLegend(svg, kTop + lanes_height + 50, buckets);
  return svg.Finish();
}

}  // namespace ddpkit::trace
