// Test helper: `promtool check metrics` on an exposition text (Debian: apt-get install
// prometheus), shared by the metrics library's and the server's tests.
#ifndef BLOSSOM_SERVER_METRICS_PROMTOOL_TEST_UTIL_H_
#define BLOSSOM_SERVER_METRICS_PROMTOOL_TEST_UTIL_H_

#include <string>

namespace blossom::metrics {

// Runs promtool on `text`; returns its exit status, or -1 if promtool is not installed. Its
// output (lint problems) is appended to *output.
int RunPromtool(const std::string& text, std::string* output);

}  // namespace blossom::metrics

#endif  // BLOSSOM_SERVER_METRICS_PROMTOOL_TEST_UTIL_H_
