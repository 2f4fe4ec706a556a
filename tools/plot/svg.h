// The one small SVG plotting module every picture ddpkit draws goes through (the contrastive
// curves, the trace timeline), so they share one look: a white page, axes with ticks and labels,
// a light grid, one legend, a palette that tells series apart.
//
//   plot::Svg svg(900, 400);
//   plot::Axes axes{.x = 60, .y = 30, .width = 380, .height = 250, .x_min = 0, .x_max = 200,
//                   .y_min = 0, .y_max = 3};
//   plot::DrawAxes(svg, axes, "step", "loss");
//   plot::DrawSeries(svg, axes, {.label = "sum", .points = ..., .style = plot::SeriesStyle(1)});
//   std::string text = svg.Finish();
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ddpkit::plot {

struct Style {
  std::string stroke = "#000000";
  double width = 1.5;
  std::string dash = {};  // SVG stroke-dasharray, "" for solid
  std::string fill = "none";
  double opacity = 1;
};

// The palette: colour i (cycling), and a series style in it.
const std::string& Colour(int i);
Style SeriesStyle(int i);

class Svg {
 public:
  Svg(double width, double height);
  double width() const { return width_; }
  double height() const { return height_; }

  // `title`: the tooltip a browser shows on hover ("" for none).
  void Rect(double x, double y, double w, double h, const Style& style,
            const std::string& title = "");
  void Line(double x1, double y1, double x2, double y2, const Style& style,
            const std::string& title = "");
  void Polyline(const std::vector<std::pair<double, double>>& points, const Style& style);
  // `rotate`: degrees about (x, y), -90 for a y-axis label.
  void Text(double x, double y, const std::string& text, double size = 11,
            const std::string& anchor = "start", const std::string& fill = "#222222",
            bool bold = false, double rotate = 0);
  // Draws a finished picture (another Svg's Finish()) with its top left corner at (x, y).
  void Embed(double x, double y, const std::string& finished);
  std::string Finish() const;

 private:
  double width_, height_;
  std::string body_;
};

// The width and height a finished picture declares ({0, 0} when it declares none).
std::pair<double, double> SvgSize(const std::string& finished);

// About `count` round tick values (1, 2 or 5 times a power of ten) covering [lo, hi].
std::vector<double> NiceTicks(double lo, double hi, int count = 5);
// "0", "2.5", "1e+04" — short.
std::string TickLabel(double value);

// A plot area in pixels and the data range it shows; linear in both directions.
struct Axes {
  double x = 0, y = 0, width = 100, height = 100;  // the area's top left corner and size
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  double X(double v) const;  // data -> pixels, clamped to the area
  double Y(double v) const;
};

// Frame, grid, ticks and labels on both axes (`y_label` "" draws no y axis, for a timeline).
void DrawAxes(Svg& svg, const Axes& axes, const std::string& x_label, const std::string& y_label);
// The same with named categories on the x axis instead of numbers: category i at x = i (so give
// the axes x_min -0.5 and x_max n - 0.5).
void DrawCategoryAxes(Svg& svg, const Axes& axes, const std::vector<std::string>& categories,
                      const std::string& x_label, const std::string& y_label);

struct Series {
  std::string label = {};
  std::vector<std::pair<double, double>> points = {};  // data coordinates; non-finite skipped
  Style style = {};
};
void DrawSeries(Svg& svg, const Axes& axes, const Series& series);

// One legend: entries in `columns` columns from (x, y), each a swatch (a line, or a filled box
// when `box`) and its label.
struct LegendEntry {
  std::string label = {};
  Style style = {};
  bool box = false;
};
// Returns the legend's height in pixels.
double DrawLegend(Svg& svg, double x, double y, const std::vector<LegendEntry>& entries,
                  int columns, double column_width);

}  // namespace ddpkit::plot
