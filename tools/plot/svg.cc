#include "tools/plot/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "autograd/base/error.h"

namespace ddpkit::plot {
namespace {

std::string Escape(const std::string& text) {
  return absl::StrReplaceAll(text,
                             {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
}

std::string StyleAttributes(const Style& s) {
  std::string out =
      absl::StrFormat(R"(stroke="%s" stroke-width="%g" fill="%s")", s.stroke, s.width, s.fill);
  if (!s.dash.empty()) absl::StrAppendFormat(&out, R"( stroke-dasharray="%s")", s.dash);
  if (s.opacity < 1) absl::StrAppendFormat(&out, R"( opacity="%g")", s.opacity);
  return out;
}

std::string TitleElement(const std::string& title) {
  return title.empty() ? "" : absl::StrFormat("<title>%s</title>", Escape(title));
}

}  // namespace

const std::string& Colour(int i) {
  // Tableau 10, which stays distinct for the common kinds of colour blindness.
  static const std::vector<std::string> kPalette = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                                    "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
                                                    "#9c755f", "#bab0ac"};
  return kPalette[static_cast<size_t>(i) % kPalette.size()];
}

Style SeriesStyle(int i) {
  Style style;
  style.stroke = Colour(i);
  style.width = 1.6;
  return style;
}

Svg::Svg(double width, double height) : width_(width), height_(height) {}

void Svg::Rect(double x, double y, double w, double h, const Style& style,
               const std::string& title) {
  absl::StrAppendFormat(
      &body_, R"(<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" %s>%s</rect>)", x, y,
      std::max(0.0, w), std::max(0.0, h), StyleAttributes(style), TitleElement(title));
  body_ += "\n";
}

void Svg::Line(double x1, double y1, double x2, double y2, const Style& style,
               const std::string& title) {
  absl::StrAppendFormat(&body_, R"(<line x1="%.2f" y1="%.2f" x2="%.2f" y2="%.2f" %s>%s</line>)", x1,
                        y1, x2, y2, StyleAttributes(style), TitleElement(title));
  body_ += "\n";
}

void Svg::Polyline(const std::vector<std::pair<double, double>>& points, const Style& style) {
  if (points.empty()) return;
  std::string coordinates;
  for (const auto& [x, y] : points) absl::StrAppendFormat(&coordinates, "%.2f,%.2f ", x, y);
  absl::StrAppendFormat(&body_, R"(<polyline points="%s" %s stroke-linejoin="round"/>)",
                        coordinates, StyleAttributes(style));
  body_ += "\n";
}

void Svg::Text(double x, double y, const std::string& text, double size, const std::string& anchor,
               const std::string& fill, bool bold, double rotate) {
  const std::string transform =
      rotate == 0 ? "" : absl::StrFormat(" transform=\"rotate(%g %.2f %.2f)\"", rotate, x, y);
  absl::StrAppendFormat(
      &body_, R"(<text x="%.2f" y="%.2f" font-size="%g" text-anchor="%s" fill="%s"%s%s>%s</text>)",
      x, y, size, anchor, fill, bold ? R"( font-weight="bold")" : "", transform, Escape(text));
  body_ += "\n";
}

void Svg::Embed(double x, double y, const std::string& finished) {
  // A nested <svg> is placed by its own x and y; its viewBox keeps its coordinates.
  constexpr std::string_view kOpen = "<svg ";
  const size_t at = finished.find(kOpen);
  if (at == std::string::npos) return;
  body_ += finished.substr(0, at);
  absl::StrAppendFormat(&body_, R"(<svg x="%.2f" y="%.2f" )", x, y);
  body_ += finished.substr(at + kOpen.size());
}

std::pair<double, double> SvgSize(const std::string& finished) {
  const size_t end = finished.find('>', finished.find("<svg "));
  const std::string root = finished.substr(0, end);
  auto attribute = [&root](std::string_view name) {
    const size_t at = root.find(ddpkit::StrCat(" ", name, "=\""));
    return at == std::string::npos ? 0.0 : std::atof(root.c_str() + at + name.size() + 3);
  };
  return {attribute("width"), attribute("height")};
}

std::string Svg::Finish() const {
  return absl::StrFormat(
             R"(<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">)",
             static_cast<int>(width_), static_cast<int>(height_), static_cast<int>(width_),
             static_cast<int>(height_)) +
         "\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n" + body_ + "</svg>\n";
}

std::vector<double> NiceTicks(double lo, double hi, int count) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / std::max(1, count);
  const int exponent = static_cast<int>(std::floor(std::log10(raw)));
  const double power = std::pow(10.0, exponent);
  double multiple = 1;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    multiple = m;
    if (m * power >= raw) break;
  }
  // Tick k is k * multiple * 10^exponent; dividing integers by 10^-exponent keeps 0.6 exactly
  // the double nearest 0.6 (3 * 0.2 would not be).
  const double inverse = exponent < 0 ? std::pow(10.0, -exponent) : 1;
  auto tick = [&](double k) {
    return exponent < 0 ? k * multiple / inverse : k * multiple * power;
  };
  std::vector<double> ticks;
  for (double k = std::ceil(lo / (multiple * power) - 1e-9); tick(k) <= hi * (1 + 1e-12); ++k) {
    ticks.push_back(tick(k) == 0 ? 0.0 : tick(k));
  }
  return ticks;
}

std::string TickLabel(double value) { return absl::StrFormat("%g", value); }

double Axes::X(double v) const {
  const double t = x_max > x_min ? (v - x_min) / (x_max - x_min) : 0;
  return x + width * std::clamp(t, 0.0, 1.0);
}

double Axes::Y(double v) const {
  const double t = y_max > y_min ? (v - y_min) / (y_max - y_min) : 0;
  return y + height * (1 - std::clamp(t, 0.0, 1.0));
}

namespace {

const Style kGrid{.stroke = "#e3e3e3", .width = 1};
const Style kTick{.stroke = "#555555", .width = 1};

// A tick, grid line and label at pixel column `px` of the x axis.
void XTick(Svg& svg, const Axes& a, double px, const std::string& label) {
  svg.Line(px, a.y, px, a.y + a.height, kGrid);
  svg.Line(px, a.y + a.height, px, a.y + a.height + 4, kTick);
  svg.Text(px, a.y + a.height + 16, label, 10, "middle", "#444444");
}

// The y axis ("" draws none), the frame and the x label: what both kinds of axes share.
void FinishAxes(Svg& svg, const Axes& a, const std::string& x_label, const std::string& y_label) {
  if (!y_label.empty()) {
    for (double v : NiceTicks(a.y_min, a.y_max, 5)) {
      svg.Line(a.x, a.Y(v), a.x + a.width, a.Y(v), kGrid);
      svg.Line(a.x - 4, a.Y(v), a.x, a.Y(v), kTick);
      svg.Text(a.x - 7, a.Y(v) + 3.5, TickLabel(v), 10, "end", "#444444");
    }
    svg.Text(a.x - 40, a.y + a.height / 2, y_label, 11, "middle", "#222222", false, -90);
  }
  svg.Rect(a.x, a.y, a.width, a.height, {.stroke = "#888888", .width = 1});
  svg.Text(a.x + a.width / 2, a.y + a.height + 32, x_label, 11, "middle", "#222222");
}

}  // namespace

void DrawAxes(Svg& svg, const Axes& a, const std::string& x_label, const std::string& y_label) {
  for (double v : NiceTicks(a.x_min, a.x_max, 8)) XTick(svg, a, a.X(v), TickLabel(v));
  FinishAxes(svg, a, x_label, y_label);
}

void DrawCategoryAxes(Svg& svg, const Axes& a, const std::vector<std::string>& categories,
                      const std::string& x_label, const std::string& y_label) {
  for (size_t i = 0; i < categories.size(); ++i) {
    XTick(svg, a, a.X(static_cast<double>(i)), categories[i]);
  }
  FinishAxes(svg, a, x_label, y_label);
}

void DrawSeries(Svg& svg, const Axes& axes, const Series& series) {
  std::vector<std::pair<double, double>> pixels;
  for (const auto& [x, y] : series.points) {
    if (std::isfinite(x) && std::isfinite(y)) pixels.emplace_back(axes.X(x), axes.Y(y));
  }
  svg.Polyline(pixels, series.style);
}

double DrawLegend(Svg& svg, double x, double y, const std::vector<LegendEntry>& entries,
                  int columns, double column_width) {
  constexpr double kRow = 18;
  for (size_t i = 0; i < entries.size(); ++i) {
    const double cx = x + static_cast<double>(i % columns) * column_width;
    const double cy = y + static_cast<double>(i / columns) * kRow;
    const LegendEntry& e = entries[i];
    if (e.box) {
      svg.Rect(cx, cy - 9, 22, 10, e.style);
    } else {
      svg.Line(cx, cy - 4, cx + 22, cy - 4, e.style);
    }
    svg.Text(cx + 28, cy, e.label, 11);
  }
  return std::ceil(static_cast<double>(entries.size()) / columns) * kRow;
}

}  // namespace ddpkit::plot
