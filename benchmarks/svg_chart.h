// A tiny SVG line-chart writer: a few series of (x, y) points against shared axes, with tick
// labels, a legend and a title, as one standalone SVG document. Enough for throughput and
// latency against batch size without Python or a plotting library.
//
// Every series becomes exactly one <polyline> (plus a <circle> per point), so tests and scripts
// can find the series in the file. Text is XML-escaped. Non-finite points, and points <= 0 on a
// log axis, are dropped.
//
// Pure function over a plain value type; thread-safe.
#ifndef BLOSSOM_BENCHMARKS_SVG_CHART_H_
#define BLOSSOM_BENCHMARKS_SVG_CHART_H_

#include <string>
#include <utility>
#include <vector>

namespace blossom {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in the given order
};

struct LineChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log2_x = false;  // batch sizes 1, 2, 4, ... spread evenly; ticks at the data's x values
  bool log10_y = false;
  std::vector<ChartSeries> series;
  int width = 720;
  int height = 440;
};

std::string RenderSvg(const LineChart& chart);

// &, <, >, " and ' as entities.
std::string XmlEscape(const std::string& text);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_SVG_CHART_H_
