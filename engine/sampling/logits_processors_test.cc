// Steps 1-8 (logits_processors.h) against the reference implementation in test_util.h, through
// SamplingDistribution(): the processors' result as a list of survivors and probabilities. The
// draw and the logprobs built on top of them are sampler_test's.
#include "engine/sampling/logits_processors.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/sampling/sampling_params.h"
#include "engine/sampling/test_util.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct ParamCase {
  std::string name;
  SamplingParams params;
  bool history = false;   // prompt/output tokens for penalties
  bool suppress = false;  // suppressed tokens
};

SamplingParams Make(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

std::vector<ParamCase> ParamCases() {
  std::vector<ParamCase> cases;
  for (float t : {0.25f, 1.0f, 2.5f, 100.0f}) {
    cases.push_back({absl::StrCat("temperature_", t), Make(t)});
  }
  cases.push_back({"greedy", Make(0.0f)});
  for (int32_t k : {-1, 0, 1, 2, 5, 50, 1000000}) {
    SamplingParams p = Make(0.8f);
    p.top_k = k;
    cases.push_back({absl::StrCat("top_k_", k), p});
  }
  for (float top_p : {0.01f, 0.3f, 0.9f, 0.999f}) {
    SamplingParams p = Make(1.0f);
    p.top_p = top_p;
    cases.push_back({absl::StrCat("top_p_", top_p), p});
  }
  for (float typical : {0.05f, 0.4f, 0.9f, 0.99f}) {
    SamplingParams p = Make(1.0f);
    p.typical_p = typical;
    cases.push_back({absl::StrCat("typical_p_", typical), p});
  }
  for (float min_p : {0.01f, 0.2f, 0.9f, 1.0f}) {
    SamplingParams p = Make(1.0f);
    p.min_p = min_p;
    cases.push_back({absl::StrCat("min_p_", min_p), p});
  }
  for (float rep : {0.7f, 1.5f}) {
    SamplingParams p = Make(1.0f);
    p.repetition_penalty = rep;
    cases.push_back({absl::StrCat("repetition_", rep), p, true});
  }
  for (float f : {-1.5f, 0.8f}) {
    SamplingParams p = Make(1.0f);
    p.frequency_penalty = f;
    cases.push_back({absl::StrCat("frequency_", f), p, true});
  }
  for (float pr : {-0.5f, 2.0f}) {
    SamplingParams p = Make(1.0f);
    p.presence_penalty = pr;
    cases.push_back({absl::StrCat("presence_", pr), p, true});
  }
  cases.push_back({"suppression", Make(1.0f), false, true});
  {
    SamplingParams p = Make(0.0f);
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.4f;
    cases.push_back({"greedy_penalised", p, true, true});
  }
  {
    SamplingParams p = Make(0.7f);
    p.top_k = 40;
    p.top_p = 0.9f;
    p.typical_p = 0.95f;
    p.min_p = 0.05f;
    p.repetition_penalty = 1.2f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.3f;
    cases.push_back({"everything", p, true, true});
  }
  {
    SamplingParams p = Make(1.3f);
    p.top_p = 0.8f;
    p.min_p = 0.02f;
    cases.push_back({"top_p_min_p", p});
  }
  {
    SamplingParams p = Make(0.5f);
    p.top_k = 500;
    p.typical_p = 0.6f;
    cases.push_back({"top_k_typical", p});
  }
  return cases;
}

// Survivors must match except for borderline tokens; probabilities are compared after
// renormalising both sides over the common survivors (a borderline token can carry real mass).
// Returns the number of borderline tokens on which the two sides differ.
int ExpectMatchesReference(const std::vector<TokenProbability>& got, const Reference& want) {
  double got_total = 0.0;
  for (const TokenProbability& t : got) got_total += t.probability;
  EXPECT_NEAR(got_total, 1.0, 1e-9);
  // Merge the two id-sorted lists.
  std::vector<int32_t> missing, unexpected;
  std::vector<std::pair<double, double>> common;  // (got, want) probabilities
  int borderline_differences = 0;
  size_t g = 0, w = 0;
  while (g < got.size() || w < want.probs.size()) {
    if (g < got.size() && w < want.probs.size() && got[g].token == want.probs[w].token) {
      common.push_back({got[g++].probability, want.probs[w++].probability});
      continue;
    }
    const bool only_want =
        g == got.size() || (w < want.probs.size() && want.probs[w].token < got[g].token);
    const int32_t token = only_want ? want.probs[w++].token : got[g++].token;
    if (want.borderline.count(token)) {
      ++borderline_differences;
    } else {
      (only_want ? missing : unexpected).push_back(token);
    }
  }
  auto show = [](const std::vector<int32_t>& v) {
    std::string out;
    for (size_t i = 0; i < v.size() && i < 8; ++i) absl::StrAppend(&out, v[i], " ");
    return out;
  };
  EXPECT_TRUE(missing.empty() && unexpected.empty())
      << got.size() << " survivors, " << want.probs.size() << " expected; missing " << show(missing)
      << "; unexpected " << show(unexpected);
  double got_common = 0.0, want_common = 0.0;
  for (const auto& pair : common) {
    got_common += pair.first;
    want_common += pair.second;
  }
  int mismatched = 0;
  for (const auto& pair : common) {
    const double expected = pair.second / want_common;
    const double actual = pair.first / got_common;
    if (std::fabs(actual - expected) > 1e-6 + 1e-4 * expected && ++mismatched <= 5) {
      ADD_FAILURE() << "probability " << actual << ", expected " << expected;
    }
  }
  return borderline_differences;
}

// Every parameter against the reference on random rows: all sizes share one scratch, which also
// checks that nothing leaks from one call into the next.
TEST(SamplerReferenceTest, SurvivorsAndProbabilitiesMatchReference) {
  SamplerScratch scratch;
  int compared = 0, masked = 0, borderline = 0;
  for (int32_t vocab : {1, 2, 7, 50000}) {
    for (LogitKind kind :
         {LogitKind::kNormal, LogitKind::kPeaked, LogitKind::kQuantized, LogitKind::kWithMasked}) {
      for (uint32_t seed : {1u, 2u, 3u}) {
        const std::vector<float> logits =
            RandomLogits(vocab, kind, seed * 1000 + static_cast<uint32_t>(vocab));
        const std::vector<int32_t> prompt = RandomTokens(vocab, 25, seed + 11);
        const std::vector<int32_t> output = RandomTokens(vocab, 15, seed + 23);
        const std::vector<int32_t> suppressed = RandomTokens(vocab, 3, seed + 37);
        for (const ParamCase& c : ParamCases()) {
          SCOPED_TRACE(absl::StrCat(c.name, " vocab=", vocab, " kind=", static_cast<int>(kind),
                                    " seed=", seed));
          const std::vector<int32_t> no_tokens;
          const std::vector<int32_t>& p_tokens = c.history ? prompt : no_tokens;
          const std::vector<int32_t>& o_tokens = c.history ? output : no_tokens;
          const std::vector<int32_t>& s_tokens = c.suppress ? suppressed : no_tokens;
          SamplingContext ctx{p_tokens, o_tokens, s_tokens};
          const Reference want =
              ReferenceDistribution(logits, c.params, p_tokens, o_tokens, s_tokens);
          absl::StatusOr<std::vector<TokenProbability>> got =
              SamplingDistribution(logits, c.params, ctx, scratch);
          if (want.probs.empty()) {
            EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
            ++masked;
            continue;
          }
          ASSERT_TRUE(got.ok()) << got.status();
          borderline += ExpectMatchesReference(*got, want);
          ++compared;
        }
      }
    }
  }
  std::printf(
      "compared %d distributions against the reference (%d fully masked, %d borderline tokens "
      "decided differently)\n",
      compared, masked, borderline);
  EXPECT_GT(compared, 1000);
  // Rounding-dependent decisions must stay rare, or the comparison would be vacuous.
  EXPECT_LE(borderline, compared / 100);
}

// A constraint for the tests: the tokens congruent to the output's length modulo 3, and the end
// token after 12 tokens.
class EveryThirdToken : public TokenConstraint {
 public:
  explicit EveryThirdToken(int32_t vocab) : vocab_(vocab) {}
  absl::StatusOr<std::shared_ptr<const TokenBitmask>> AllowedTokens(
      absl::Span<const int32_t> output, int32_t end_token) const override {
    auto mask = std::make_shared<TokenBitmask>((vocab_ + 63) / 64, 0);
    for (int32_t t = static_cast<int32_t>(output.size() % 3); t < vocab_; t += 3) {
      (*mask)[t / 64] |= uint64_t{1} << (t % 64);
    }
    if (output.size() >= 12 && end_token >= 0) (*mask)[end_token / 64] |= uint64_t{1} << (end_token % 64);
    return mask;
  }

 private:
  int32_t vocab_;
};

// allowed_token_ids, bad words and logit_bias (alone and with penalties and filters) against the
// reference, with token ids drawn for each vocabulary and bad words that do and do not match the
// output's end.
TEST(SamplerReferenceTest, MasksAndLogitBiasMatchReference) {
  SamplerScratch scratch;
  int compared = 0;
  for (int32_t vocab : {7, 50000}) {
    for (LogitKind kind : {LogitKind::kNormal, LogitKind::kQuantized, LogitKind::kWithMasked}) {
      for (uint32_t seed : {1u, 2u}) {
        const std::vector<float> logits = RandomLogits(vocab, kind, seed * 77 + vocab);
        const std::vector<int32_t> prompt = RandomTokens(vocab, 20, seed + 3);
        const std::vector<int32_t> output = RandomTokens(vocab, 12, seed + 5);
        const std::vector<int32_t> picked = RandomTokens(vocab, 6, seed + 9);
        const int32_t last = vocab - 1;
        std::vector<SamplingParams> variants;
        for (float temperature : {0.0f, 0.8f}) {
          SamplingParams allowed = Make(temperature);
          allowed.allowed_token_ids = {picked[0], picked[1], picked[2], last};
          SamplingParams bad = Make(temperature);
          bad.bad_words_token_ids = {{picked[3]},                              // always
                                     {output[10], output[11], last},          // matches the end
                                     {output[11], output[10], picked[4]}};  // does not
          SamplingParams biased = Make(temperature);
          biased.logit_bias = {{picked[0], 5.0f}, {last, -100.0f}};
          if (picked[1] != picked[0] && picked[1] != last) {
            biased.logit_bias.push_back({picked[1], 100.0f});
          }
          SamplingParams choice = Make(temperature);
          choice.choice_token_ids = {{output[0], output[1], picked[0]},  // continues the output?
                                     {picked[1]},
                                     {picked[2], picked[3]}};
          variants.push_back(choice);
          SamplingParams choice_in_allowed = choice;  // the allowed set leaves the end token out
          choice_in_allowed.allowed_token_ids = {picked[0], picked[1], picked[2]};
          variants.push_back(choice_in_allowed);
          SamplingParams constrained = Make(temperature);
          constrained.constraint = std::make_shared<EveryThirdToken>(vocab);
          constrained.allowed_token_ids = {picked[0], picked[1], picked[2]};
          variants.push_back(constrained);
          SamplingParams all = biased;
          all.allowed_token_ids = allowed.allowed_token_ids;
          all.bad_words_token_ids = bad.bad_words_token_ids;
          all.repetition_penalty = 1.3f;
          all.frequency_penalty = 0.4f;
          all.top_k = 3;
          all.top_p = 0.9f;
          variants.insert(variants.end(), {allowed, bad, biased, all});
        }
        for (size_t v = 0; v < variants.size(); ++v) {
          SCOPED_TRACE(absl::StrCat("variant ", v, " vocab=", vocab, " kind=",
                                    static_cast<int>(kind), " seed=", seed));
          const std::vector<int32_t> none;
          SamplingContext ctx{prompt, output, none};
          ctx.end_token = last;
          const Reference want =
              ReferenceDistribution(logits, variants[v], prompt, output, none, ctx.end_token);
          absl::StatusOr<std::vector<TokenProbability>> got =
              SamplingDistribution(logits, variants[v], ctx, scratch);
          if (want.probs.empty()) {
            EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
            continue;
          }
          ASSERT_TRUE(got.ok()) << got.status();
          ExpectMatchesReference(*got, want);
          ++compared;
        }
      }
    }
  }
  EXPECT_GE(compared, 80);
}

TEST(SamplerMasksTest, EachMaskAndBiasDecidesGreedy) {
  SamplerScratch scratch;
  const std::vector<float> logits = {0.0f, 3.0f, 1.0f, 2.0f, -1.0f};
  const std::vector<int32_t> output = {4, 2};
  SamplingContext ctx{{}, output, {}};
  auto greedy = [&](const SamplingParams& p) {
    absl::StatusOr<std::vector<TokenProbability>> d = SamplingDistribution(logits, p, ctx, scratch);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() && d->size() == 1 ? (*d)[0].token : -1;
  };
  SamplingParams p = Make(0.0f);
  EXPECT_EQ(greedy(p), 1);
  p.allowed_token_ids = {0, 2, 4};
  EXPECT_EQ(greedy(p), 2) << "the best allowed token";
  p = Make(0.0f);
  p.bad_words_token_ids = {{1}};
  EXPECT_EQ(greedy(p), 3) << "a one-token bad word is never generated";
  p.bad_words_token_ids = {{3, 1}, {2, 4, 1}};
  EXPECT_EQ(greedy(p), 1) << "neither prefix ends the output {4, 2}";
  p.bad_words_token_ids = {{4, 2, 1}};
  EXPECT_EQ(greedy(p), 3) << "the output ends with 4 2: 1 is banned";
  p.bad_words_token_ids = {{2, 1}, {2, 3}};
  EXPECT_EQ(greedy(p), 2) << "after 2, both 1 and 3 are banned";
  p = Make(0.0f);
  p.logit_bias = {{4, 100.0f}};
  EXPECT_EQ(greedy(p), 4);
  p.logit_bias = {{1, -100.0f}};
  EXPECT_EQ(greedy(p), 3);
  // Everything masked: FailedPrecondition, as for suppression.
  p = Make(0.0f);
  p.allowed_token_ids = {1};
  p.bad_words_token_ids = {{1}};
  EXPECT_EQ(SamplingDistribution(logits, p, ctx, scratch).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(SamplerMasksTest, AllowedTokenIdsKeepTheEndTokenOfAGuidedOutput) {
  SamplerScratch scratch;
  const std::vector<float> logits(6, 0.0f);
  SamplingParams p = Make(0.0f);
  p.allowed_token_ids = {1};
  p.choice_token_ids = {{1}};
  const std::vector<int32_t> output = {1};
  SamplingContext ctx{{}, output, {}};
  ctx.end_token = 5;
  absl::StatusOr<std::vector<TokenProbability>> d = SamplingDistribution(logits, p, ctx, scratch);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0].token, 5) << "the whole choice ends although 5 is not in allowed_token_ids";
  p.choice_token_ids.clear();
  d = SamplingDistribution(logits, p, ctx, scratch);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)[0].token, 1) << "without a guided output the allowed set is the whole rule";
}

// Guided choice: the output stays a prefix of a choice and ends (the end token) only on a whole
// one.
TEST(SamplerMasksTest, GuidedChoiceAllowsTheNextTokensAndTheEndOfAWholeChoice) {
  SamplerScratch scratch;
  std::vector<float> logits(12, 0.0f);
  SamplingParams p = Make(1.0f);
  p.choice_token_ids = {{5, 6}, {5, 7, 8}, {9}, {5}};
  auto support = [&](std::vector<int32_t> output, int32_t end_token) {
    SamplingContext ctx{{}, output, {}};
    ctx.end_token = end_token;
    absl::StatusOr<std::vector<TokenProbability>> d = SamplingDistribution(logits, p, ctx, scratch);
    std::vector<int32_t> tokens;
    if (d.ok()) {
      for (const TokenProbability& t : *d) tokens.push_back(t.token);
    }
    return tokens;
  };
  EXPECT_EQ(support({}, 11), std::vector<int32_t>({5, 9}));
  EXPECT_EQ(support({5}, 11), std::vector<int32_t>({6, 7, 11})) << "{5} is whole: it may end";
  EXPECT_EQ(support({5, 7}, 11), std::vector<int32_t>({8}));
  EXPECT_EQ(support({5, 6}, 11), std::vector<int32_t>({11}));
  EXPECT_EQ(support({9}, 11), std::vector<int32_t>({11}));
  // Without an end token (ignore_eos) a whole choice has nothing after it: fully masked.
  SamplingContext no_end{{}, std::vector<int32_t>{9}, {}};
  const std::vector<int32_t> nine = {9};
  no_end.output_tokens = nine;
  EXPECT_EQ(SamplingDistribution(logits, p, no_end, scratch).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Greedy picks the most likely allowed token.
  logits[9] = 3.0f;
  logits[5] = 1.0f;
  logits[0] = 10.0f;
  SamplingParams greedy = p;
  greedy.temperature = 0.0f;
  SamplingContext start;
  start.end_token = 11;
  absl::StatusOr<std::vector<TokenProbability>> d =
      SamplingDistribution(logits, greedy, start, scratch);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0].token, 9);
  EXPECT_FALSE(RowIsUnedited(greedy, start));
}

// Hand-made rows whose boundaries fall exactly on ties or on the cumulative threshold.
struct BoundaryCase {
  std::string name;
  std::vector<float> logits;
  SamplingParams params;
  std::vector<int32_t> survivors;
};

std::vector<BoundaryCase> BoundaryCases() {
  std::vector<BoundaryCase> cases;
  auto add = [&](std::string name, std::vector<float> logits, auto mutate,
                 std::vector<int32_t> survivors) {
    SamplingParams p;
    mutate(p);
    cases.push_back({std::move(name), std::move(logits), p, std::move(survivors)});
  };
  const std::vector<float> uniform4 = {0, 0, 0, 0};
  // Uniform over 4: cumulative mass before tokens 0..3 is exactly 0, .25, .5, .75.
  add("top_p_exactly_half", uniform4, [](SamplingParams& p) { p.top_p = 0.5f; }, {0, 1});
  add("top_p_just_above_half", uniform4,
      [](SamplingParams& p) { p.top_p = std::nextafter(0.5f, 1.0f); }, {0, 1, 2});
  add("top_p_quarter", uniform4, [](SamplingParams& p) { p.top_p = 0.25f; }, {0});
  add("top_p_tiny", uniform4, [](SamplingParams& p) { p.top_p = 1e-6f; }, {0});
  add("top_p_three_quarters", uniform4, [](SamplingParams& p) { p.top_p = 0.75f; }, {0, 1, 2});
  add("top_p_one", uniform4, [](SamplingParams& p) { p.top_p = 1.0f; }, {0, 1, 2, 3});
  // Boundary inside a tie group: the lowest ids of the group survive.
  {
    const std::vector<float> l = {2, 1, 1, 1, 0};
    double z = 0;
    for (float v : l) z += std::exp(v);
    const float top_p = static_cast<float>((std::exp(2.0) + 1.5 * std::exp(1.0)) / z);
    add("top_p_inside_tie_group", l, [top_p](SamplingParams& p) { p.top_p = top_p; }, {0, 1, 2});
  }
  add("top_p_ties_reordered", {1, 0, 1, 0, 1}, [](SamplingParams& p) { p.top_p = 0.5f; }, {0, 2});
  // top_k keeps every token tied with the k-th largest value.
  const std::vector<float> k_row = {3, 1, 2, 2, 2, 0};
  add("top_k_1", k_row, [](SamplingParams& p) { p.top_k = 1; }, {0});
  add("top_k_2_ties", k_row, [](SamplingParams& p) { p.top_k = 2; }, {0, 2, 3, 4});
  add("top_k_4_ties", k_row, [](SamplingParams& p) { p.top_k = 4; }, {0, 2, 3, 4});
  add("top_k_5", k_row, [](SamplingParams& p) { p.top_k = 5; }, {0, 1, 2, 3, 4});
  add("top_k_6", k_row, [](SamplingParams& p) { p.top_k = 6; }, {0, 1, 2, 3, 4, 5});
  add("top_k_masked_short", {-kInf, 1, -kInf}, [](SamplingParams& p) { p.top_k = 2; }, {1});
  // min_p = 1 keeps exactly the tied maxima.
  add("min_p_one_ties", {1, 3, 0, 3}, [](SamplingParams& p) { p.min_p = 1.0f; }, {1, 3});
  // typical_p on a uniform row: every score is 0, so all tie and all survive.
  add("typical_uniform", {0.5f, 0.5f, 0.5f}, [](SamplingParams& p) { p.typical_p = 0.1f; },
      {0, 1, 2});
  // Tiny temperature: the tied maxima share the mass, everything else underflows.
  add("tiny_temperature", {1, 5, 5, 2}, [](SamplingParams& p) { p.temperature = 1e-30f; }, {1, 2});
  return cases;
}

TEST(SamplerReferenceTest, ExactBoundaries) {
  SamplerScratch scratch;
  for (const BoundaryCase& c : BoundaryCases()) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<std::vector<TokenProbability>> got =
        SamplingDistribution(c.logits, c.params, SamplingContext(), scratch);
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<int32_t> ids;
    for (const TokenProbability& t : *got) ids.push_back(t.token);
    EXPECT_EQ(ids, c.survivors);
    const Reference want = ReferenceDistribution(c.logits, c.params, {}, {}, {});
    EXPECT_EQ(ExpectMatchesReference(*got, want), 0);
    EXPECT_EQ(want.probs.size(), c.survivors.size());
  }
}

// The greedy path that reads an unedited row in place gives Prepare + Argmax's token and errors:
// ties to the lowest id, -inf masks, a row of -inf, NaN and +inf at the start, middle and tail
// (the vector loop's remainder), bad ids and bad params.
TEST(UneditedGreedyTest, SameTokenAndErrorsAsPrepareThenArgmax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> rows;
  for (size_t n : {1, 3, 4, 7, 8, 1001}) {
    std::vector<float> r(n);
    for (size_t i = 0; i < n; ++i) r[i] = std::sin(0.7f * static_cast<float>(i)) * 5.0f;
    rows.push_back(r);
    if (n >= 4) {
      std::vector<float> tie = r;
      tie[n - 1] = tie[1] = 9.0f;  // two maxima: the lower id wins
      rows.push_back(tie);
    }
    rows.push_back(std::vector<float>(n, -kInf));
    for (size_t at : {size_t{0}, n / 2, n - 1}) {
      for (float bad : {nan, kInf, -kInf}) {
        std::vector<float> b = r;
        b[at] = bad;
        rows.push_back(b);
      }
    }
  }
  SamplingContext ctx;
  const std::vector<int32_t> history = {0, 2};
  ctx.prompt_tokens = history;
  const SamplingParams greedy = Make(0.0f);
  int checked = 0;
  for (const std::vector<float>& row : rows) {
    SamplerScratch scratch;
    const absl::Status prepared = PrepareLogits(row, greedy, ctx, scratch);
    const absl::StatusOr<int32_t> want =
        prepared.ok() ? GreedyToken(scratch) : absl::StatusOr<int32_t>(prepared);
    absl::StatusOr<int32_t> got = UneditedGreedyToken(row, greedy, ctx);
    ASSERT_EQ(want.status(), got.status()) << "row of " << row.size();
    if (want.ok()) {
      EXPECT_EQ(*want, *got) << "row of " << row.size();
    }
    ++checked;
  }
  EXPECT_GT(checked, 40);
  // Token ids out of range and invalid params fail the same way.
  const std::vector<float> row(16, 1.0f);
  SamplingContext bad_ids;
  const std::vector<int32_t> out_of_range = {16};
  bad_ids.output_tokens = out_of_range;
  SamplerScratch scratch;
  EXPECT_EQ(PrepareLogits(row, greedy, bad_ids, scratch),
            UneditedGreedyToken(row, greedy, bad_ids).status());
  EXPECT_FALSE(UneditedGreedyToken(row, greedy, bad_ids).ok());
  SamplingParams bad_params = greedy;
  bad_params.top_p = 1.5f;
  EXPECT_EQ(PrepareLogits(row, bad_params, ctx, scratch),
            UneditedGreedyToken(row, bad_params, ctx).status());
  EXPECT_FALSE(UneditedGreedyToken(row, bad_params, ctx).ok());
}

// Suppression and penalties edit the row; anything else leaves it as it is.
TEST(UneditedGreedyTest, RowIsUneditedOnlyWithoutSuppressionOrPenalties) {
  SamplingContext ctx;
  EXPECT_TRUE(RowIsUnedited(Make(0.0f), ctx));
  const std::vector<int32_t> suppressed = {1};
  SamplingContext with_suppressed;
  with_suppressed.suppressed_tokens = suppressed;
  EXPECT_FALSE(RowIsUnedited(Make(0.0f), with_suppressed));
  SamplingParams p = Make(0.0f);
  p.repetition_penalty = 1.1f;
  EXPECT_FALSE(RowIsUnedited(p, ctx));
  p = Make(0.0f);
  p.frequency_penalty = 0.5f;
  EXPECT_FALSE(RowIsUnedited(p, ctx));
  p = Make(0.0f);
  p.presence_penalty = -0.5f;
  EXPECT_FALSE(RowIsUnedited(p, ctx));
  p = Make(0.0f);
  p.allowed_token_ids = {1};
  EXPECT_FALSE(RowIsUnedited(p, ctx));
  p = Make(0.0f);
  p.bad_words_token_ids = {{1}};
  EXPECT_FALSE(RowIsUnedited(p, ctx));
  p = Make(0.0f);
  p.logit_bias = {{1, 0.5f}};
  EXPECT_FALSE(RowIsUnedited(p, ctx));
}

}  // namespace
}  // namespace blossom
