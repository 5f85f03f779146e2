#include "engine/sampling/sampling_params.h"

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using ::testing::HasSubstr;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int32_t kVocab = 1000;

struct SamplingCase {
  std::string name;
  std::function<void(SamplingParams&)> mutate;
  std::string field;  // empty: the params are valid
};

std::vector<SamplingCase> SamplingCases() {
  return {
      // Valid boundary values.
      {"defaults", [](SamplingParams&) {}, ""},
      {"greedy", [](SamplingParams& p) { p.temperature = 0.0f; }, ""},
      {"max_temperature", [](SamplingParams& p) { p.temperature = kMaxTemperature; }, ""},
      {"top_k_minus_one", [](SamplingParams& p) { p.top_k = -1; }, ""},
      {"top_k_one", [](SamplingParams& p) { p.top_k = 1; }, ""},
      {"top_k_above_vocab", [](SamplingParams& p) { p.top_k = kVocab + 5; }, ""},
      {"top_p_tiny", [](SamplingParams& p) { p.top_p = 1e-6f; }, ""},
      {"typical_p_tiny", [](SamplingParams& p) { p.typical_p = 1e-6f; }, ""},
      {"min_p_one", [](SamplingParams& p) { p.min_p = 1.0f; }, ""},
      {"repetition_small", [](SamplingParams& p) { p.repetition_penalty = 1e-3f; }, ""},
      {"repetition_large", [](SamplingParams& p) { p.repetition_penalty = 50.0f; }, ""},
      {"frequency_low", [](SamplingParams& p) { p.frequency_penalty = -2.0f; }, ""},
      {"frequency_high", [](SamplingParams& p) { p.frequency_penalty = 2.0f; }, ""},
      {"presence_low", [](SamplingParams& p) { p.presence_penalty = -2.0f; }, ""},
      {"presence_high", [](SamplingParams& p) { p.presence_penalty = 2.0f; }, ""},
      {"logprobs_zero", [](SamplingParams& p) { p.logprobs = 0; }, ""},
      {"logprobs_max", [](SamplingParams& p) { p.logprobs = kMaxLogprobs; }, ""},
      {"prompt_logprobs_max", [](SamplingParams& p) { p.prompt_logprobs = kMaxLogprobs; }, ""},
      {"seed_max", [](SamplingParams& p) { p.seed = ~uint64_t{0}; }, ""},
      {"allowed_ids", [](SamplingParams& p) { p.allowed_token_ids = {0, kVocab - 1, 0}; }, ""},
      {"choices", [](SamplingParams& p) { p.choice_token_ids = {{1, 2}, {kVocab - 1}}; }, ""},
      {"bad_words", [](SamplingParams& p) { p.bad_words_token_ids = {{5}, {1, 2, kVocab - 1}}; },
       ""},
      {"logit_bias_range",
       [](SamplingParams& p) { p.logit_bias = {{0, -kMaxLogitBias}, {kVocab - 1, kMaxLogitBias}}; },
       ""},
      {"logit_bias_most",
       [](SamplingParams& p) {
         for (int32_t t = 0; t < static_cast<int32_t>(kMaxLogitBiasTokens); ++t) {
           p.logit_bias.push_back({t, 1.0f});
         }
       },
       ""},
      // Invalid values: each must name its field.
      {"temperature_negative", [](SamplingParams& p) { p.temperature = -0.1f; }, "temperature"},
      {"temperature_nan", [](SamplingParams& p) { p.temperature = kNan; }, "temperature"},
      {"temperature_inf", [](SamplingParams& p) { p.temperature = kInf; }, "temperature"},
      {"temperature_above_max", [](SamplingParams& p) { p.temperature = 100.5f; }, "temperature"},
      {"top_k_minus_two", [](SamplingParams& p) { p.top_k = -2; }, "top_k"},
      {"top_p_zero", [](SamplingParams& p) { p.top_p = 0.0f; }, "top_p"},
      {"top_p_negative", [](SamplingParams& p) { p.top_p = -0.5f; }, "top_p"},
      {"top_p_above_one", [](SamplingParams& p) { p.top_p = 1.5f; }, "top_p"},
      {"top_p_nan", [](SamplingParams& p) { p.top_p = kNan; }, "top_p"},
      {"top_p_inf", [](SamplingParams& p) { p.top_p = kInf; }, "top_p"},
      {"typical_p_zero", [](SamplingParams& p) { p.typical_p = 0.0f; }, "typical_p"},
      {"typical_p_above_one", [](SamplingParams& p) { p.typical_p = 1.01f; }, "typical_p"},
      {"typical_p_nan", [](SamplingParams& p) { p.typical_p = kNan; }, "typical_p"},
      {"min_p_negative", [](SamplingParams& p) { p.min_p = -0.1f; }, "min_p"},
      {"min_p_above_one", [](SamplingParams& p) { p.min_p = 1.1f; }, "min_p"},
      {"min_p_nan", [](SamplingParams& p) { p.min_p = kNan; }, "min_p"},
      {"min_p_minus_inf", [](SamplingParams& p) { p.min_p = -kInf; }, "min_p"},
      {"repetition_zero", [](SamplingParams& p) { p.repetition_penalty = 0.0f; },
       "repetition_penalty"},
      {"repetition_negative", [](SamplingParams& p) { p.repetition_penalty = -1.0f; },
       "repetition_penalty"},
      {"repetition_nan", [](SamplingParams& p) { p.repetition_penalty = kNan; },
       "repetition_penalty"},
      {"repetition_inf", [](SamplingParams& p) { p.repetition_penalty = kInf; },
       "repetition_penalty"},
      {"frequency_above", [](SamplingParams& p) { p.frequency_penalty = 2.01f; },
       "frequency_penalty"},
      {"frequency_below", [](SamplingParams& p) { p.frequency_penalty = -2.01f; },
       "frequency_penalty"},
      {"frequency_nan", [](SamplingParams& p) { p.frequency_penalty = kNan; }, "frequency_penalty"},
      {"frequency_inf", [](SamplingParams& p) { p.frequency_penalty = -kInf; },
       "frequency_penalty"},
      {"presence_above", [](SamplingParams& p) { p.presence_penalty = 3.0f; }, "presence_penalty"},
      {"presence_below", [](SamplingParams& p) { p.presence_penalty = -3.0f; }, "presence_penalty"},
      {"presence_nan", [](SamplingParams& p) { p.presence_penalty = kNan; }, "presence_penalty"},
      {"presence_inf", [](SamplingParams& p) { p.presence_penalty = kInf; }, "presence_penalty"},
      {"logprobs_minus_two", [](SamplingParams& p) { p.logprobs = -2; }, "logprobs"},
      {"logprobs_above_max", [](SamplingParams& p) { p.logprobs = kMaxLogprobs + 1; }, "logprobs"},
      {"prompt_logprobs_above_max",
       [](SamplingParams& p) { p.prompt_logprobs = kMaxLogprobs + 1; }, "prompt_logprobs"},
      {"allowed_id_outside", [](SamplingParams& p) { p.allowed_token_ids = {3, kVocab}; },
       "allowed_token_ids[1]"},
      {"allowed_id_negative", [](SamplingParams& p) { p.allowed_token_ids = {-1}; },
       "allowed_token_ids[0]"},
      {"allowed_ids_above_vocab", [](SamplingParams& p) { p.allowed_token_ids.assign(kVocab + 1, 0); },
       "allowed_token_ids"},
      {"bad_word_empty", [](SamplingParams& p) { p.bad_words_token_ids = {{1}, {}}; },
       "bad_words[1]"},
      {"bad_word_too_long",
       [](SamplingParams& p) { p.bad_words_token_ids = {std::vector<int32_t>(kMaxBadWordTokens + 1, 1)}; },
       "bad_words[0]"},
      {"bad_word_token_outside", [](SamplingParams& p) { p.bad_words_token_ids = {{1, kVocab}}; },
       "bad_words[0] token"},
      {"bad_words_too_many",
       [](SamplingParams& p) { p.bad_words_token_ids.assign(kMaxBadWordSequences + 1, {1}); },
       "bad_words"},
      {"choice_empty", [](SamplingParams& p) { p.choice_token_ids = {{1}, {}}; },
       "guided_choice[1]"},
      {"choice_token_outside", [](SamplingParams& p) { p.choice_token_ids = {{1, kVocab}}; },
       "guided_choice[0] token"},
      {"choices_too_many",
       [](SamplingParams& p) { p.choice_token_ids.assign(kMaxGuidedChoices + 1, {1}); },
       "guided_choice"},
      {"choice_too_long",
       [](SamplingParams& p) { p.choice_token_ids = {std::vector<int32_t>(kMaxChoiceTokens + 1, 1)}; },
       "guided_choice[0]"},
      {"logit_bias_token_outside", [](SamplingParams& p) { p.logit_bias = {{kVocab, 1.0f}}; },
       "logit_bias token"},
      {"logit_bias_above", [](SamplingParams& p) { p.logit_bias = {{4, 100.5f}}; },
       "logit_bias[4]"},
      {"logit_bias_nan", [](SamplingParams& p) { p.logit_bias = {{4, kNan}}; }, "logit_bias[4]"},
      {"logit_bias_too_many",
       [](SamplingParams& p) {
         for (int32_t t = 0; t <= static_cast<int32_t>(kMaxLogitBiasTokens); ++t) {
           p.logit_bias.push_back({t, 1.0f});
         }
       },
       "logit_bias"},
  };
}

TEST(ValidateSamplingParamsTest, Table) {
  for (const SamplingCase& c : SamplingCases()) {
    SCOPED_TRACE(c.name);
    SamplingParams params;
    c.mutate(params);
    const absl::Status status = Validate(params, kVocab);
    if (c.field.empty()) {
      EXPECT_TRUE(status.ok()) << status;
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(status.message(), HasSubstr(c.field + " must be "));
      EXPECT_THAT(status.message(), HasSubstr(", got "));
    }
  }
}

TEST(ValidateSamplingParamsTest, LogitBiasNamesATokenOnce) {
  SamplingParams params;
  params.logit_bias = {{7, 1.0f}, {3, -1.0f}, {7, 2.0f}};
  const absl::Status status = Validate(params, kVocab);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "logit_bias names token 7 more than once");
}

TEST(ValidateSamplingParamsTest, MessageNamesFieldRangeAndValue) {
  SamplingParams params;
  params.top_p = 1.5f;
  EXPECT_EQ(Validate(params, kVocab).message(), "top_p must be in (0, 1], got 1.5");
  params = SamplingParams();
  params.temperature = kNan;
  EXPECT_EQ(Validate(params, kVocab).message(),
            "temperature must be in [0, 100] (0 = greedy), got nan");
  params = SamplingParams();
  params.frequency_penalty = 2.5f;
  EXPECT_EQ(Validate(params, kVocab).message(), "frequency_penalty must be in [-2, 2], got 2.5");
}

TEST(ValidateSamplingParamsTest, RejectsEmptyVocabulary) {
  EXPECT_EQ(Validate(SamplingParams(), 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Validate(SamplingParams(), 1).ok());
}

struct StoppingCase {
  std::string name;
  std::function<void(StoppingParams&)> mutate;
  std::string field;  // empty: valid
};

std::vector<StoppingCase> StoppingCases() {
  return {
      {"defaults", [](StoppingParams&) {}, ""},
      {"max_one", [](StoppingParams& p) { p.max_new_tokens = 1; }, ""},
      {"min_equals_max", [](StoppingParams& p) { p.min_new_tokens = p.max_new_tokens; }, ""},
      {"stop_ids_edges",
       [](StoppingParams& p) {
         p.stop_token_ids = {0, kVocab - 1};
       },
       ""},
      {"max_stop_ids", [](StoppingParams& p) { p.stop_token_ids.assign(kMaxStopTokenIds, 3); }, ""},
      {"max_stop_strings", [](StoppingParams& p) { p.stop_strings.assign(kMaxStopStrings, "x"); },
       ""},
      {"longest_stop_string",
       [](StoppingParams& p) { p.stop_strings = {std::string(kMaxStopStringBytes, 'a')}; }, ""},
      {"utf8_stop_string",
       [](StoppingParams& p) {
         p.stop_strings = {"世界", "\xF0\x9F\x98\x80"};
       },
       ""},
      {"max_zero", [](StoppingParams& p) { p.max_new_tokens = 0; }, "max_new_tokens"},
      {"max_negative", [](StoppingParams& p) { p.max_new_tokens = -5; }, "max_new_tokens"},
      {"min_negative", [](StoppingParams& p) { p.min_new_tokens = -1; }, "min_new_tokens"},
      {"min_above_max", [](StoppingParams& p) { p.min_new_tokens = p.max_new_tokens + 1; },
       "min_new_tokens"},
      {"stop_id_negative",
       [](StoppingParams& p) {
         p.stop_token_ids = {5, -1};
       },
       "stop_token_ids[1]"},
      {"stop_id_vocab", [](StoppingParams& p) { p.stop_token_ids = {kVocab}; },
       "stop_token_ids[0]"},
      {"too_many_stop_ids",
       [](StoppingParams& p) { p.stop_token_ids.assign(kMaxStopTokenIds + 1, 3); },
       "stop_token_ids"},
      {"empty_stop_string",
       [](StoppingParams& p) {
         p.stop_strings = {"ok", ""};
       },
       "stop_strings[1]"},
      {"too_many_stop_strings",
       [](StoppingParams& p) { p.stop_strings.assign(kMaxStopStrings + 1, "x"); }, "stop_strings"},
      {"too_long_stop_string",
       [](StoppingParams& p) { p.stop_strings = {std::string(kMaxStopStringBytes + 1, 'a')}; },
       "stop_strings[0]"},
      {"invalid_utf8_truncated", [](StoppingParams& p) { p.stop_strings = {"\xE4\xB8"}; },
       "stop_strings[0]"},
      {"invalid_utf8_lone_continuation", [](StoppingParams& p) { p.stop_strings = {"a\x80"}; },
       "stop_strings[0]"},
      {"invalid_utf8_overlong", [](StoppingParams& p) { p.stop_strings = {"\xC0\xAF"}; },
       "stop_strings[0]"},
      {"invalid_utf8_surrogate", [](StoppingParams& p) { p.stop_strings = {"\xED\xA0\x80"}; },
       "stop_strings[0]"},
  };
}

TEST(ValidateStoppingParamsTest, Table) {
  for (const StoppingCase& c : StoppingCases()) {
    SCOPED_TRACE(c.name);
    StoppingParams params;
    c.mutate(params);
    const absl::Status status = Validate(params, kVocab);
    if (c.field.empty()) {
      EXPECT_TRUE(status.ok()) << status;
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(status.message(), HasSubstr(c.field));
    }
  }
}

TEST(ValidateStoppingParamsTest, Messages) {
  StoppingParams params;
  params.min_new_tokens = 20;
  EXPECT_EQ(Validate(params, kVocab).message(),
            "min_new_tokens must be in [0, max_new_tokens] = [0, 16], got 20");
  params = StoppingParams();
  params.stop_token_ids = {kVocab};
  EXPECT_EQ(Validate(params, kVocab).message(),
            "stop_token_ids[0] must be in [0, vocab_size) = [0, 1000), got 1000");
  params = StoppingParams();
  params.stop_strings = {""};
  EXPECT_EQ(Validate(params, kVocab).message(),
            "stop_strings[0] length must be in [1, 256] bytes, got 0");
}

TEST(IsGreedyTest, OnlyZeroTemperature) {
  SamplingParams params;
  EXPECT_FALSE(IsGreedy(params));
  params.temperature = 0.0f;
  EXPECT_TRUE(IsGreedy(params));
  params.temperature = 1e-6f;
  EXPECT_FALSE(IsGreedy(params));
}

}  // namespace
}  // namespace blossom
