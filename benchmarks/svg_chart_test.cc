#include "benchmarks/svg_chart.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

// A minimal XML well-formedness check: every element closed in order, attribute quotes
// balanced, no raw '&' outside entities. Enough to catch a broken writer without an XML library.
bool WellFormed(const std::string& xml, std::string* error) {
  std::vector<std::string> stack;
  size_t i = 0;
  while ((i = xml.find_first_of("<&", i)) != std::string::npos) {
    if (xml[i] == '&') {
      const size_t semi = xml.find(';', i);
      if (semi == std::string::npos || semi - i > 6) {
        *error = "raw & at " + std::to_string(i);
        return false;
      }
      i = semi;
      continue;
    }
    if (xml.compare(i, 2, "<?") == 0) {
      i = xml.find("?>", i);
      if (i == std::string::npos) return *error = "unterminated <?", false;
      continue;
    }
    // Find the tag end, skipping quoted attribute values.
    size_t j = i + 1;
    char quote = 0;
    for (; j < xml.size(); ++j) {
      if (quote != 0) {
        if (xml[j] == quote) quote = 0;
        if (xml[j] == '<') return *error = "< inside an attribute", false;
      } else if (xml[j] == '"' || xml[j] == '\'') {
        quote = xml[j];
      } else if (xml[j] == '>') {
        break;
      }
    }
    if (j >= xml.size()) return *error = "unterminated tag", false;
    const std::string tag = xml.substr(i + 1, j - i - 1);
    if (tag.empty()) return *error = "empty tag", false;
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) {
        *error = "unexpected </" + name + ">";
        return false;
      }
      stack.pop_back();
    } else if (tag.back() != '/') {
      stack.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
    }
    i = j;
  }
  if (!stack.empty()) return *error = "unclosed <" + stack.back() + ">", false;
  return true;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t i = text.find(what); i != std::string::npos; i = text.find(what, i + 1)) ++n;
  return n;
}

TEST(SvgChartTest, OnePolylinePerSeriesAndWellFormed) {
  LineChart chart;
  chart.title = "Throughput <bloom-demo> & friends";
  chart.x_label = "batch size";
  chart.y_label = "tokens/s";
  chart.log2_x = true;
  chart.series = {{"total", {{1, 10}, {2, 19}, {4, 35}, {8, 60}}},
                  {"decode \"only\"", {{1, 12}, {2, 22}, {4, 40}, {8, 70}}},
                  {"empty", {}}};
  const std::string svg = RenderSvg(chart);
  std::string error;
  EXPECT_TRUE(WellFormed(svg, &error)) << error << "\n" << svg;
  EXPECT_EQ(Count(svg, "<polyline"), 3);
  EXPECT_EQ(Count(svg, "<circle"), 8);
  EXPECT_NE(svg.find("Throughput &lt;bloom-demo&gt; &amp; friends"), std::string::npos);
  EXPECT_NE(svg.find("decode &quot;only&quot;"), std::string::npos);
  EXPECT_EQ(svg.rfind("</svg>\n"), svg.size() - 7);
  // Batch sizes are the x tick labels.
  for (const char* tick : {">1<", ">2<", ">4<", ">8<"})
    EXPECT_NE(svg.find(tick), std::string::npos);
}

TEST(SvgChartTest, LogYDropsNonPositivePointsAndSinglePointsWork) {
  LineChart chart;
  chart.log2_x = true;
  chart.log10_y = true;
  chart.series = {{"a", {{1, 0.0}, {2, 0.5}, {4, 250.0}}}, {"b", {{64, 3.0}}}};
  const std::string svg = RenderSvg(chart);
  std::string error;
  EXPECT_TRUE(WellFormed(svg, &error)) << error;
  EXPECT_EQ(Count(svg, "<polyline"), 2);
  EXPECT_EQ(Count(svg, "<circle"), 3);  // (1, 0) is not drawable on a log axis
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(SvgChartTest, EmptyChartIsStillValid) {
  std::string error;
  const std::string svg = RenderSvg(LineChart{});
  EXPECT_TRUE(WellFormed(svg, &error)) << error;
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

TEST(SvgChartTest, WellFormedCheckerCatchesBrokenXml) {
  std::string error;
  EXPECT_FALSE(WellFormed("<svg><g></svg>", &error));
  EXPECT_FALSE(WellFormed("<svg>a & b</svg>", &error));
  EXPECT_TRUE(WellFormed("<svg a=\"x>y\"><g/></svg>", &error)) << error;
}

}  // namespace
}  // namespace blossom
