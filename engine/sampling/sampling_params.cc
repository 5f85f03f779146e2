#include "engine/sampling/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace blossom {
namespace {

// Every check is written as "!(value in range)" so that NaN, which fails every comparison, is
// rejected by the same test that rejects out-of-range values.
absl::Status OutOfRange(absl::string_view field, absl::string_view range, float value) {
  return absl::InvalidArgumentError(absl::StrCat(field, " must be ", range, ", got ", value));
}

absl::Status OutOfRange(absl::string_view field, absl::string_view range, int64_t value) {
  return absl::InvalidArgumentError(absl::StrCat(field, " must be ", range, ", got ", value));
}

// Stop strings are matched byte-wise; requiring valid UTF-8 guarantees that a match (and the held
// back prefix of one) starts on a character boundary of valid output text, so truncating there
// never splits a character. Rejects overlong forms, surrogates and code points above U+10FFFF.
bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

// At most max_count sequences of 1..max_length token ids in the vocabulary; errors name
// field[i] (bad_words, guided_choice).
absl::Status CheckTokenSequences(const std::vector<std::vector<int32_t>>& sequences,
                                 absl::string_view field, size_t max_count, size_t max_length,
                                 int32_t vocab_size) {
  if (sequences.size() > max_count) {
    return OutOfRange(field, absl::StrCat("at most ", max_count, " token sequences"),
                      static_cast<int64_t>(sequences.size()));
  }
  for (size_t i = 0; i < sequences.size(); ++i) {
    const std::vector<int32_t>& sequence = sequences[i];
    if (sequence.empty() || sequence.size() > max_length) {
      return OutOfRange(absl::StrCat(field, "[", i, "]"),
                        absl::StrCat("1 to ", max_length, " tokens long"),
                        static_cast<int64_t>(sequence.size()));
    }
    for (int32_t t : sequence) {
      if (t < 0 || t >= vocab_size) {
        return OutOfRange(absl::StrCat(field, "[", i, "] token"),
                          absl::StrCat("in [0, ", vocab_size, ")"), int64_t{t});
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Validate(const SamplingParams& p, int32_t vocab_size) {
  if (vocab_size < 1) return OutOfRange("vocab_size", ">= 1", int64_t{vocab_size});
  if (!(p.temperature >= 0.0f && p.temperature <= kMaxTemperature)) {
    return OutOfRange("temperature", absl::StrCat("in [0, ", kMaxTemperature, "] (0 = greedy)"),
                      p.temperature);
  }
  if (p.top_k < kTopKDisabled) {
    return OutOfRange("top_k", ">= -1 (-1 or 0 = disabled)", int64_t{p.top_k});
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return OutOfRange("top_p", "in (0, 1]", p.top_p);
  if (!(p.typical_p > 0.0f && p.typical_p <= 1.0f)) {
    return OutOfRange("typical_p", "in (0, 1]", p.typical_p);
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return OutOfRange("min_p", "in [0, 1]", p.min_p);
  if (!(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty))) {
    return OutOfRange("repetition_penalty", "finite and > 0", p.repetition_penalty);
  }
  const std::string additive_range =
      absl::StrCat("in [", kMinAdditivePenalty, ", ", kMaxAdditivePenalty, "]");
  if (!(p.frequency_penalty >= kMinAdditivePenalty && p.frequency_penalty <= kMaxAdditivePenalty)) {
    return OutOfRange("frequency_penalty", additive_range, p.frequency_penalty);
  }
  if (!(p.presence_penalty >= kMinAdditivePenalty && p.presence_penalty <= kMaxAdditivePenalty)) {
    return OutOfRange("presence_penalty", additive_range, p.presence_penalty);
  }
  if (p.logprobs < -1 || p.logprobs > kMaxLogprobs) {
    return OutOfRange("logprobs", absl::StrCat("in [-1, ", kMaxLogprobs, "] (-1 = none)"),
                      int64_t{p.logprobs});
  }
  if (p.prompt_logprobs < -1 || p.prompt_logprobs > kMaxLogprobs) {
    return OutOfRange("prompt_logprobs", absl::StrCat("in [-1, ", kMaxLogprobs, "] (-1 = none)"),
                      int64_t{p.prompt_logprobs});
  }
  const std::string vocab_range = absl::StrCat("in [0, ", vocab_size, ")");
  if (p.allowed_token_ids.size() > static_cast<size_t>(vocab_size)) {
    return OutOfRange("allowed_token_ids", absl::StrCat("at most vocab_size = ", vocab_size, " ids"),
                      static_cast<int64_t>(p.allowed_token_ids.size()));
  }
  for (size_t i = 0; i < p.allowed_token_ids.size(); ++i) {
    const int32_t t = p.allowed_token_ids[i];
    if (t < 0 || t >= vocab_size) {
      return OutOfRange(absl::StrCat("allowed_token_ids[", i, "]"), vocab_range, int64_t{t});
    }
  }
  absl::Status status = CheckTokenSequences(p.bad_words_token_ids, "bad_words",
                                             kMaxBadWordSequences, kMaxBadWordTokens, vocab_size);
  if (!status.ok()) return status;
  status = CheckTokenSequences(p.choice_token_ids, "guided_choice", kMaxGuidedChoices,
                               kMaxChoiceTokens, vocab_size);
  if (!status.ok()) return status;
  if (p.logit_bias.size() > kMaxLogitBiasTokens) {
    return OutOfRange("logit_bias", absl::StrCat("at most ", kMaxLogitBiasTokens, " tokens"),
                      static_cast<int64_t>(p.logit_bias.size()));
  }
  std::vector<int32_t> biased;
  biased.reserve(p.logit_bias.size());
  for (const LogitBias& b : p.logit_bias) {
    if (b.token < 0 || b.token >= vocab_size) {
      return OutOfRange("logit_bias token", vocab_range, int64_t{b.token});
    }
    if (!(b.bias >= -kMaxLogitBias && b.bias <= kMaxLogitBias)) {
      return OutOfRange(absl::StrCat("logit_bias[", b.token, "]"),
                        absl::StrCat("in [", -kMaxLogitBias, ", ", kMaxLogitBias, "]"), b.bias);
    }
    biased.push_back(b.token);
  }
  std::sort(biased.begin(), biased.end());
  auto twice = std::adjacent_find(biased.begin(), biased.end());
  if (twice != biased.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("logit_bias names token ", *twice, " more than once"));
  }
  return absl::OkStatus();
}

absl::Status Validate(const StoppingParams& p, int32_t vocab_size) {
  if (vocab_size < 1) return OutOfRange("vocab_size", ">= 1", int64_t{vocab_size});
  if (p.max_new_tokens < 1) return OutOfRange("max_new_tokens", ">= 1", int64_t{p.max_new_tokens});
  if (p.min_new_tokens < 0 || p.min_new_tokens > p.max_new_tokens) {
    return OutOfRange("min_new_tokens",
                      absl::StrCat("in [0, max_new_tokens] = [0, ", p.max_new_tokens, "]"),
                      int64_t{p.min_new_tokens});
  }
  if (p.stop_token_ids.size() > kMaxStopTokenIds) {
    return absl::InvalidArgumentError(absl::StrCat("stop_token_ids must have at most ",
                                                   kMaxStopTokenIds, " entries, got ",
                                                   p.stop_token_ids.size()));
  }
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    const int32_t id = p.stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return OutOfRange(absl::StrCat("stop_token_ids[", i, "]"),
                        absl::StrCat("in [0, vocab_size) = [0, ", vocab_size, ")"), int64_t{id});
    }
  }
  if (p.stop_strings.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(absl::StrCat("stop_strings must have at most ",
                                                   kMaxStopStrings, " entries, got ",
                                                   p.stop_strings.size()));
  }
  for (size_t i = 0; i < p.stop_strings.size(); ++i) {
    const std::string& s = p.stop_strings[i];
    if (s.empty() || s.size() > kMaxStopStringBytes) {
      return OutOfRange(absl::StrCat("stop_strings[", i, "] length"),
                        absl::StrCat("in [1, ", kMaxStopStringBytes, "] bytes"),
                        static_cast<int64_t>(s.size()));
    }
    if (!IsValidUtf8(s)) {
      return absl::InvalidArgumentError(absl::StrCat("stop_strings[", i, "] must be valid UTF-8"));
    }
  }
  return absl::OkStatus();
}

}  // namespace blossom
