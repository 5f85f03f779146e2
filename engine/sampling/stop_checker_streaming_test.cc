// StopChecker's stop strings: matching, hold-back while streaming, UTF-8 boundaries, and a
// property test over random streams. Token rules are in stop_checker_test.cc.
#include "engine/sampling/stop_checker.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/sampling/stop_checker_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace stop_checker_test {
namespace {

using ::testing::ElementsAre;

bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80           ? 1
                       : (c >> 5) == 0x6  ? 2
                       : (c >> 4) == 0xE  ? 3
                       : (c >> 3) == 0x1E ? 4
                                          : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Stop strings.

struct StopCase {
  std::string name;
  StoppingParams params;
  std::vector<std::string> deltas;
  std::vector<std::string> chunks;  // expected text_to_emit per call
  FinishReason reason;
  std::string matched_stop;
};

std::vector<StopCase> StopCases() {
  StoppingParams include = Stops({"STOP"});
  include.include_stop_string_in_output = true;
  std::vector<StopCase> cases = {
      {"split_over_two",
       Stops({"STOP"}),
       {"Hello ST", "OP more"},
       {"Hello ", ""},
       FinishReason::kStopString,
       "STOP"},
      {"split_over_three",
       Stops({"STOP"}),
       {"Hel", "lo S", "T", "OP"},
       {"Hel", "lo ", "", ""},
       FinishReason::kStopString,
       "STOP"},
      {"split_over_many",
       Stops({"<|end|>"}),
       {"x", "<", "|", "e", "n", "d", "|", ">", "y"},
       {"x", "", "", "", "", "", "", ""},
       FinishReason::kStopString,
       "<|end|>"},
      {"prefix_released",
       Stops({"abc"}),
       {"xa", "b", "d"},
       {"x", "", "abd"},
       FinishReason::kNone,
       ""},
      {"prefix_released_then_restarts",
       Stops({"abc"}),
       {"ab", "ab", "c"},
       {"", "ab", ""},
       FinishReason::kStopString,
       "abc"},
      {"first_token", Stops({"STOP"}), {"STOP", "more"}, {""}, FinishReason::kStopString, "STOP"},
      {"delta_with_trailing_text",
       Stops({"STOP"}),
       {"hello STOP world"},
       {"hello "},
       FinishReason::kStopString,
       "STOP"},
      {"include_in_one_delta",
       include,
       {"hello STOP world"},
       {"hello STOP"},
       FinishReason::kStopString,
       "STOP"},
      // Included, a possible start of the stop string is not held: it is output either way.
      {"include_split",
       include,
       {"hel", "lo ST", "OP!"},
       {"hel", "lo ST", "OP"},
       FinishReason::kStopString,
       "STOP"},
      {"include_prefix_not_held",
       include,
       {"a S", "x"},
       {"a S", "x"},
       FinishReason::kNone,
       ""},
      // Overlapping stop strings: the one that ends first wins; on a common end, the longest.
      {"overlap_ab_first",
       Stops({"ab", "bc", "abcd"}),
       {"z", "a", "b", "c", "d"},
       {"z", "", ""},
       FinishReason::kStopString,
       "ab"},
      {"overlap_bc_before_abcd",
       Stops({"abcd", "bc"}),
       {"zab", "cd"},
       {"z", "a"},
       FinishReason::kStopString,
       "bc"},
      {"overlap_same_end_longest",
       Stops({"bcd", "abcd"}),
       {"xabcd"},
       {"x"},
       FinishReason::kStopString,
       "abcd"},
      {"overlap_inside_held_prefix",
       Stops({"abcd", "cx"}),
       {"ab", "c", "x"},
       {"", "", "ab"},
       FinishReason::kStopString,
       "cx"},
      {"overlap_ab_bc_abcd_one_delta",
       Stops({"ab", "bc", "abcd"}),
       {"zabcd"},
       {"z"},
       FinishReason::kStopString,
       "ab"},
      // Repetitive patterns where the automaton's fail links matter.
      {"aab_in_aaab",
       Stops({"aab"}),
       {"a", "a", "a", "b"},
       {"", "", "a", ""},
       FinishReason::kStopString,
       "aab"},
      {"abab_in_ababab",
       Stops({"ababc"}),
       {"abab", "ab", "c"},
       {"", "ab", ""},
       FinishReason::kStopString,
       "ababc"},
      {"no_stop_strings", Stops({}), {"a", "b"}, {"a", "b"}, FinishReason::kNone, ""},
  };
  return cases;
}

TEST(StopCheckerTest, StopStrings) {
  for (const StopCase& c : StopCases()) {
    SCOPED_TRACE(c.name);
    StopChecker checker(c.params, {kEos});
    const Stream s = Feed(checker, TextSteps(c.deltas));
    EXPECT_EQ(s.chunks, c.chunks);
    EXPECT_EQ(s.reason, c.reason);
    EXPECT_EQ(s.finished, c.reason != FinishReason::kNone);
    EXPECT_EQ(s.matched_stop, c.matched_stop);
    if (s.finished) {
      EXPECT_EQ(checker.Flush(), "");
    }
  }
}

TEST(StopCheckerTest, FlushReturnsHeldTextOnce) {
  StopChecker checker(Stops({"abc"}), {kEos});
  const Stream s = Feed(checker, TextSteps({"x", "ab"}));
  EXPECT_EQ(s.text, "x");
  EXPECT_FALSE(s.finished);
  EXPECT_EQ(checker.Flush(), "ab");
  EXPECT_EQ(checker.Flush(), "");
}

TEST(StopCheckerTest, ProcessAfterFinishReturnsFinishedWithoutText) {
  StopChecker checker(Stops({"x"}), {kEos});
  EXPECT_TRUE(checker.Process(kText, "axb").finished);
  const StopChecker::Result again = checker.Process(kText, "more");
  EXPECT_TRUE(again.finished);
  EXPECT_EQ(again.reason, FinishReason::kStopString);
  EXPECT_EQ(again.text_to_emit, "");
  EXPECT_EQ(checker.num_generated(), 1);
}

// TGI's rule (stop_at_text_end, with the stop string kept as TGI keeps it): only text ending with
// a stop string after a whole token stops; a match inside a token's text, or one the same token
// continues past, is ordinary text, so the output is never cut inside a token.
TEST(StopCheckerTest, AtTextEndStopsOnlyWhenTheTextEndsWithTheStop) {
  StoppingParams tgi = Stops({"the"});
  tgi.include_stop_string_in_output = true;
  tgi.stop_at_text_end = true;
  {
    StopChecker checker(tgi, {kEos});
    const Stream s = Feed(checker, TextSteps({"The", " weather", " is", " the", " best"}));
    EXPECT_THAT(s.chunks, ElementsAre("The", " weather", " is", " the"));
    EXPECT_EQ(s.reason, FinishReason::kStopString);
    EXPECT_EQ(s.matched_stop, "the");
  }
  {
    StopChecker checker(tgi, {kEos});  // completed across tokens, at the end of the second
    const Stream s = Feed(checker, TextSteps({"... t", "he", " end"}));
    EXPECT_EQ(s.text, "... the");
    EXPECT_EQ(s.steps, 2u);
  }
  {
    StopChecker checker(tgi, {kEos});  // "the" inside "athens" is not at the end
    const Stream s = Feed(checker, TextSteps({"athens", " and", " then"}));
    EXPECT_EQ(s.text, "athens and then");
    EXPECT_FALSE(s.finished);
  }
  // vLLM's rule on the same text stops inside " weather", cutting it.
  StoppingParams vllm = tgi;
  vllm.stop_at_text_end = false;
  StopChecker checker(vllm, {kEos});
  const Stream s = Feed(checker, TextSteps({"The", " weather", " is"}));
  EXPECT_EQ(s.text, "The weathe");
  EXPECT_EQ(s.reason, FinishReason::kStopString);
}

// ---------------------------------------------------------------------------------------------
// UTF-8.

TEST(StopCheckerTest, MultiByteStopStringSplitAcrossBytes) {
  const std::string text = "你好世界!";
  std::vector<std::string> bytes;
  for (char ch : text) bytes.push_back(std::string(1, ch));
  StopChecker checker(Stops({"世界"}), {kEos});
  const Stream s = Feed(checker, TextSteps(bytes));
  EXPECT_EQ(s.text, "你好");
  EXPECT_EQ(s.reason, FinishReason::kStopString);
  EXPECT_EQ(s.matched_stop, "世界");
  for (const std::string& chunk : s.chunks) EXPECT_TRUE(IsValidUtf8(chunk)) << chunk;
}

TEST(StopCheckerTest, CharacterSharingLeadBytesWithStopStringIsReleasedWhole) {
  // 界 is E7 95 8C; 畍 is E7 95 8D: the first two bytes are a prefix of the stop string.
  StopChecker checker(Stops({"界"}), {kEos});
  const Stream s = Feed(checker, TextSteps({"a", "\xE7", "\x95", "\x8D", "b"}));
  EXPECT_THAT(s.chunks, ElementsAre("a", "", "", "畍", "b"));
  EXPECT_FALSE(s.finished);
}

TEST(StopCheckerTest, IncompleteCharacterIsHeldUntilComplete) {
  StopChecker checker(Stops({}), {kEos});
  const Stream s = Feed(checker, TextSteps({"caf\xC3", "\xA9 ok", "\xF0\x9F", "\x98", "\x80"}));
  EXPECT_THAT(s.chunks, ElementsAre("caf", "é ok", "", "", "😀"));
}

TEST(StopCheckerTest, IncompleteCharacterIsFlushedAtTheEnd) {
  StopChecker checker(Stops({}, 2), {kEos});
  Stream s = Feed(checker, TextSteps({"ab\xE4\xB8"}));
  EXPECT_EQ(s.text, "ab");
  EXPECT_EQ(checker.Flush(), "\xE4\xB8");

  StopChecker by_length(Stops({}, 1), {kEos});
  s = Feed(by_length, TextSteps({"ab\xE4\xB8"}));
  EXPECT_EQ(s.text, "ab\xE4\xB8");  // the request ended: nothing may be lost
  EXPECT_EQ(s.reason, FinishReason::kLength);
}

// ---------------------------------------------------------------------------------------------
// Property test over random streams: random text of ASCII and multi-byte characters, random stop
// strings (often taken from the text), random byte-level splits (including splits inside
// characters and empty deltas), random min_new_tokens and include flag.

struct Expected {
  std::string output;  // full text truncated at the first accepted stop match
  FinishReason reason;
  std::string matched_stop;
  size_t steps;  // tokens consumed
};

// Straight from the spec: the first byte position e (in text order) at which some stop string
// ends, counting only ends inside the text of token number > min_new_tokens; on a common end,
// the longest stop string.
Expected ReferenceStop(const std::string& text, const std::vector<size_t>& delta_ends,
                       const std::vector<std::string>& stops, int32_t min_new_tokens,
                       int32_t max_new_tokens, bool include) {
  size_t token = 0;  // index into delta_ends of the token containing byte e - 1
  for (size_t e = 1; e <= text.size(); ++e) {
    while (delta_ends[token] < e) ++token;
    if (static_cast<int32_t>(token) + 1 > max_new_tokens) break;
    if (static_cast<int32_t>(token) + 1 <= min_new_tokens) continue;
    const std::string* best = nullptr;
    for (const std::string& stop : stops) {
      if (stop.size() <= e && text.compare(e - stop.size(), stop.size(), stop) == 0 &&
          (best == nullptr || stop.size() > best->size())) {
        best = &stop;
      }
    }
    if (best != nullptr) {
      return {text.substr(0, include ? e : e - best->size()), FinishReason::kStopString, *best,
              token + 1};
    }
  }
  const size_t tokens = std::min(delta_ends.size(), static_cast<size_t>(max_new_tokens));
  const std::string fed = text.substr(0, tokens == 0 ? 0 : delta_ends[tokens - 1]);
  return {
      fed,
      static_cast<int32_t>(tokens) == max_new_tokens ? FinishReason::kLength : FinishReason::kNone,
      "", tokens};
}

// Longest suffix of text that is a proper prefix of some stop string.
size_t ReferenceHold(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& stop : stops) {
    for (size_t len = std::min(stop.size() - 1, text.size()); len > hold; --len) {
      if (text.compare(text.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}

TEST(StopCheckerPropertyTest, EmittedPlusFlushEqualsTruncatedText) {
  std::mt19937 gen(20240607);
  const std::vector<std::string> alphabet = {"a", "b", "c", "a", "b", "é", "世", "d"};
  auto pick = [&gen](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(gen); };
  int stopped = 0, by_length = 0, flushed = 0;
  constexpr int kCases = 5000;
  for (int iteration = 0; iteration < kCases; ++iteration) {
    SCOPED_TRACE(absl::StrCat("iteration ", iteration));
    // Text made of whole characters; remember where each character starts.
    std::string text;
    std::set<size_t> char_starts;
    const size_t chars = pick(40);
    for (size_t i = 0; i < chars; ++i) {
      char_starts.insert(text.size());
      text += alphabet[pick(alphabet.size())];
    }
    char_starts.insert(text.size());
    // Stop strings: random, or cut from the text so that matches are frequent.
    std::vector<std::string> stops;
    const size_t num_stops = 1 + pick(3);
    for (size_t i = 0; i < num_stops; ++i) {
      std::string stop;
      if (chars > 0 && pick(4) == 0) {
        std::vector<size_t> starts(char_starts.begin(), char_starts.end());
        const size_t a = pick(starts.size() - 1);
        const size_t b = std::min(starts.size() - 1, a + 1 + pick(4));
        stop = text.substr(starts[a], starts[b] - starts[a]);
      } else {
        const size_t len = 1 + pick(4);
        for (size_t k = 0; k < len; ++k) stop += alphabet[pick(alphabet.size())];
      }
      stops.push_back(stop);
    }
    // Byte-level splits into deltas (empty ones included).
    std::vector<std::string> deltas;
    std::vector<size_t> delta_ends;
    size_t pos = 0;
    while (pos < text.size() || deltas.empty()) {
      const size_t len = std::min(text.size() - pos, pick(5));
      deltas.push_back(text.substr(pos, len));
      pos += len;
      delta_ends.push_back(pos);
    }
    StoppingParams params = Stops(stops);
    const int32_t num_deltas = static_cast<int32_t>(deltas.size());
    params.max_new_tokens = pick(2) == 0 ? num_deltas : num_deltas + 5;
    params.min_new_tokens = static_cast<int32_t>(pick(3) == 0 ? pick(deltas.size() + 1) : 0);
    params.include_stop_string_in_output = pick(2) == 0;
    SCOPED_TRACE(absl::StrCat("text '", text, "' stops {", absl::StrJoin(stops, "|"), "} deltas {",
                              absl::StrJoin(deltas, "|"), "} min ", params.min_new_tokens, " max ",
                              params.max_new_tokens,
                              params.include_stop_string_in_output ? " include" : ""));
    const Expected want =
        ReferenceStop(text, delta_ends, stops, params.min_new_tokens, params.max_new_tokens,
                      params.include_stop_string_in_output);

    StopChecker checker(params, {kEos});
    std::string emitted;
    std::string fed;
    size_t steps = 0;
    StopChecker::Result last;
    for (const std::string& delta : deltas) {
      last = checker.Process(kText, delta);
      ++steps;
      fed += delta;
      emitted += last.text_to_emit;
      ASSERT_TRUE(IsValidUtf8(last.text_to_emit));
      // Streamed text never shows anything that the final output will not contain, so never
      // any part of a matched stop string.
      ASSERT_EQ(want.output.compare(0, emitted.size(), emitted), 0)
          << "emitted '" << emitted << "'";
      if (last.finished) break;
      // Minimal hold-back: exactly the longest suffix that is a proper prefix of a stop string
      // (none when the stop string is included), moved back to a character boundary.
      const size_t cut =
          fed.size() - (params.include_stop_string_in_output ? 0 : ReferenceHold(fed, stops));
      const size_t boundary = *std::prev(char_starts.upper_bound(cut));
      ASSERT_EQ(emitted.size(), boundary) << "fed '" << fed << "'";
    }
    const std::string rest = checker.Flush();
    if (!rest.empty()) ++flushed;
    EXPECT_EQ(emitted + rest, want.output);
    EXPECT_EQ(last.reason, want.reason);
    EXPECT_EQ(last.finished, want.reason != FinishReason::kNone);
    EXPECT_EQ(last.matched_stop, want.matched_stop);
    EXPECT_EQ(steps, want.steps);
    if (want.reason == FinishReason::kStopString) ++stopped;
    if (want.reason == FinishReason::kLength) ++by_length;
  }
  std::printf("%d random streams: %d stopped on a string, %d on length, %d needed Flush()\n",
              kCases, stopped, by_length, flushed);
  // The generator must exercise every ending, or the property would be vacuous.
  EXPECT_GT(stopped, kCases / 5);
  EXPECT_GT(by_length, kCases / 10);
  EXPECT_GT(flushed, kCases / 50);
}

}  // namespace
}  // namespace stop_checker_test
}  // namespace blossom
