#include "benchmarks/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace blossom {
namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

// Tick labels: short and exact enough ("0.25", "12.5", "1.2e+06").
std::string FormatTick(double v) {
  if (v == 0.0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e6 || a < 1e-3) return absl::StrFormat("%.3g", v);
  return absl::StrFormat("%.4g", v);
}

// 1, 2 or 5 times a power of ten, near range / target_ticks.
double NiceStep(double range, int target_ticks) {
  const double raw = range / target_ticks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / magnitude;
  const double nice = r < 1.5 ? 1.0 : r < 3.5 ? 2.0 : r < 7.5 ? 5.0 : 10.0;
  return nice * magnitude;
}

}  // namespace

std::string XmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string RenderSvg(const LineChart& chart) {
  // Transformed coordinates (log axes applied), keeping only drawable points.
  auto tx = [&](double x) { return chart.log2_x ? std::log2(x) : x; };
  auto ty = [&](double y) { return chart.log10_y ? std::log10(y) : y; };
  auto usable = [&](double x, double y) {
    return std::isfinite(x) && std::isfinite(y) && (!chart.log2_x || x > 0) &&
           (!chart.log10_y || y > 0);
  };
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min;
  double y_min = x_min, y_max = -x_min;
  std::set<double> x_values;
  for (const ChartSeries& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      if (!usable(x, y)) continue;
      x_min = std::min(x_min, tx(x));
      x_max = std::max(x_max, tx(x));
      y_min = std::min(y_min, ty(y));
      y_max = std::max(y_max, ty(y));
      x_values.insert(x);
    }
  }
  if (x_values.empty()) {  // nothing to draw: still a valid, labelled chart
    x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  }
  if (!chart.log10_y) y_min = std::min(0.0, y_min);  // linear y starts at zero
  if (x_max == x_min) x_min -= 0.5, x_max += 0.5;
  if (y_max == y_min) y_max = y_min + 1.0;
  if (chart.log10_y) {
    y_min = std::floor(y_min);
    y_max = std::ceil(y_max);
    if (y_max == y_min) y_max += 1.0;
  } else {
    y_max += 0.05 * (y_max - y_min);
  }

  const double left = 80, right = 190, top = 40, bottom = 60;
  const double plot_w = chart.width - left - right, plot_h = chart.height - top - bottom;
  auto px = [&](double x) { return left + (tx(x) - x_min) / (x_max - x_min) * plot_w; };
  auto py_t = [&](double t) { return top + plot_h - (t - y_min) / (y_max - y_min) * plot_h; };

  std::string svg = absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
      chart.width, chart.height, chart.width, chart.height, chart.width, chart.height);
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.1f\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">%s"
                        "</text>\n",
                        left + plot_w / 2, XmlEscape(chart.title));
  // Axes box.
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                        "stroke=\"black\"/>\n",
                        left, top, plot_w, plot_h);
  // X ticks: the data's x values on a log2 axis (batch sizes), else a nice linear grid.
  std::vector<double> x_ticks;
  if (chart.log2_x || x_values.empty()) {
    x_ticks.assign(x_values.begin(), x_values.end());
  } else {
    const double step = NiceStep(x_max - x_min, 6);
    for (double t = std::ceil(x_min / step) * step; t <= x_max + 1e-9 * step; t += step)
      x_ticks.push_back(t);
  }
  for (double x : x_ticks) {
    const double X = px(x);
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
        X, top, X, top + plot_h, X, top + plot_h + 16, FormatTick(x));
  }
  // Y ticks.
  std::vector<double> y_ticks;  // transformed values
  if (chart.log10_y) {
    for (double t = y_min; t <= y_max + 1e-9; t += 1.0) y_ticks.push_back(t);
  } else {
    const double step = NiceStep(y_max - y_min, 6);
    for (double t = std::ceil(y_min / step) * step; t <= y_max + 1e-9 * step; t += step)
      y_ticks.push_back(t);
  }
  for (double t : y_ticks) {
    const double Y = py_t(t);
    const double label = chart.log10_y ? std::pow(10.0, t) : t;
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
        left, Y, left + plot_w, Y, left - 6, Y + 4, FormatTick(label));
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n"
                        "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" "
                        "transform=\"rotate(-90 18 %.1f)\">%s</text>\n",
                        left + plot_w / 2, top + plot_h + 40, XmlEscape(chart.x_label),
                        top + plot_h / 2, top + plot_h / 2, XmlEscape(chart.y_label));
  // Series: one polyline each, markers, legend entry.
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const ChartSeries& s = chart.series[i];
    const char* color = kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
    std::string points, markers;
    for (const auto& [x, y] : s.points) {
      if (!usable(x, y)) continue;
      absl::StrAppendFormat(&points, "%s%.2f,%.2f", points.empty() ? "" : " ", px(x), py_t(ty(y)));
      absl::StrAppendFormat(&markers, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>\n",
                            px(x), py_t(ty(y)), color);
    }
    absl::StrAppendFormat(&svg,
                          "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                          "points=\"%s\"><title>%s</title></polyline>\n%s",
                          color, points, XmlEscape(s.name), markers);
    const double ly = top + 10 + 20.0 * i;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                          "stroke-width=\"2\"/>\n"
                          "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                          left + plot_w + 12, ly, left + plot_w + 36, ly, color, left + plot_w + 42,
                          ly + 4, XmlEscape(s.name));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace blossom
