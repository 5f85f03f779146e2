// Feeding a StopChecker token by token, shared by its tests (stop_checker_test.cc: token rules;
// stop_checker_streaming_test.cc: stop strings, hold-back and UTF-8).
#ifndef BLOSSOM_ENGINE_SAMPLING_STOP_CHECKER_TEST_UTIL_H_
#define BLOSSOM_ENGINE_SAMPLING_STOP_CHECKER_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampling/sampling_params.h"
#include "engine/sampling/stop_checker.h"

namespace blossom {
namespace stop_checker_test {

constexpr int32_t kText = 100;  // an ordinary token
constexpr int32_t kEos = 2;
constexpr int32_t kStopId = 7;

struct Step {
  int32_t token;
  std::string delta;
};

// Everything a stream produced, fed until the checker reports finished.
struct Stream {
  std::vector<std::string> chunks;  // text_to_emit of each Process call
  std::string text;                 // their concatenation
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string matched_stop;
  size_t steps = 0;  // Process calls made
};

inline Stream Feed(StopChecker& checker, const std::vector<Step>& steps) {
  Stream out;
  for (const Step& step : steps) {
    StopChecker::Result r = checker.Process(step.token, step.delta);
    ++out.steps;
    out.chunks.push_back(r.text_to_emit);
    out.text += r.text_to_emit;
    if (r.finished) {
      out.finished = true;
      out.reason = r.reason;
      out.matched_stop = r.matched_stop;
      break;
    }
  }
  return out;
}

inline std::vector<Step> TextSteps(const std::vector<std::string>& deltas) {
  std::vector<Step> steps;
  for (const std::string& d : deltas) steps.push_back({kText, d});
  return steps;
}

inline StoppingParams Stops(std::vector<std::string> stop_strings, int32_t max_new_tokens = 100) {
  StoppingParams p;
  p.max_new_tokens = max_new_tokens;
  p.stop_strings = std::move(stop_strings);
  return p;
}

}  // namespace stop_checker_test
}  // namespace blossom

#endif  // BLOSSOM_ENGINE_SAMPLING_STOP_CHECKER_TEST_UTIL_H_
