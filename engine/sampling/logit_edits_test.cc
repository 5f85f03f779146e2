// LogitEdits against the host sampler: for random requests using every step-1 feature (allowed
// ids, guided choice, a constraint, bad words, suppressed tokens, logit_bias) together with
// penalties, the host's distribution of the request on the raw row equals, exactly, its
// distribution without those features on the row ApplyLogitEdits left. Plus the cases where the
// rules are subtle: the end token of a guided output, a constraint's short bitmask, errors.
#include "engine/sampling/logit_edits.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "engine/sampling/test_util.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

constexpr int32_t kVocab = 200;
constexpr int32_t kEnd = 2;

// Allows the ids that are multiples of `step`, and the end token once the output has
// `length` tokens; its bitmask stops at `words` words (ids past it are not allowed).
class EveryNth : public TokenConstraint {
 public:
  EveryNth(int32_t step, size_t length, size_t words)
      : step_(step), length_(length), words_(words) {}
  absl::StatusOr<std::shared_ptr<const TokenBitmask>> AllowedTokens(
      absl::Span<const int32_t> output, int32_t end_token) const override {
    if (output.size() > length_) return absl::FailedPreconditionError("output past the end");
    auto mask = std::make_shared<TokenBitmask>(words_, 0);
    for (int32_t t = 0; t < static_cast<int32_t>(words_ * 64); t += step_) {
      (*mask)[t / 64] |= uint64_t{1} << (t % 64);
    }
    const bool in_mask = end_token >= 0 && end_token / 64 < static_cast<int32_t>(words_);
    if (output.size() == length_ && in_mask) {
      (*mask)[end_token / 64] |= uint64_t{1} << (end_token % 64);
    }
    return mask;
  }

 private:
  int32_t step_;
  size_t length_;
  size_t words_;
};

SamplingParams WithoutStepOne(SamplingParams p) {
  p.allowed_token_ids.clear();
  p.choice_token_ids.clear();
  p.constraint = nullptr;
  p.bad_words_token_ids.clear();
  p.logit_bias.clear();
  return p;
}

// The host's distribution for (params, ctx) on `raw`, and for the same request stripped of step
// 1 on the edited row: equal (or both failing with the same code).
// Returns through *sampled whether the request had a token to sample (else both failed).
void ExpectEditsAreStepOne(const std::vector<float>& raw, const SamplingParams& params,
                           const SamplingContext& ctx, bool* sampled = nullptr) {
  ASSERT_TRUE(Validate(params, kVocab).ok()) << Validate(params, kVocab);
  SamplerScratch scratch;
  const absl::StatusOr<std::vector<TokenProbability>> want =
      SamplingDistribution(raw, params, ctx, scratch);
  LogitEdits edits;
  ASSERT_TRUE(BuildLogitEdits(params, ctx, kVocab, &edits).ok());
  EXPECT_EQ(edits.empty(), !HasLogitEdits(params, ctx) || edits.empty());
  std::vector<float> edited = raw;
  ApplyLogitEdits(edits, absl::MakeSpan(edited));
  SamplingContext plain = ctx;
  plain.suppressed_tokens = {};
  const absl::StatusOr<std::vector<TokenProbability>> got =
      SamplingDistribution(edited, WithoutStepOne(params), plain, scratch);
  ASSERT_EQ(got.ok(), want.ok()) << got.status() << " vs " << want.status();
  if (sampled != nullptr) *sampled = want.ok();
  if (!want.ok()) {
    EXPECT_EQ(got.status().code(), want.status().code());
    return;
  }
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < want->size(); ++i) {
    EXPECT_EQ((*got)[i].token, (*want)[i].token) << i;
    EXPECT_EQ((*got)[i].probability, (*want)[i].probability) << "token " << (*want)[i].token;
  }
}

TEST(LogitEditsTest, RandomRequestsMatchTheHostSamplersStepOne) {
  std::mt19937 gen(5);
  auto coin = [&] { return gen() % 2 == 0; };
  auto id = [&] { return static_cast<int32_t>(gen() % kVocab); };
  int sampled_trials = 0;
  for (int trial = 0; trial < 400; ++trial) {
    SCOPED_TRACE(trial);
    const std::vector<float> raw =
        RandomLogits(kVocab, trial % 4 == 0 ? LogitKind::kWithMasked : LogitKind::kNormal, trial);
    const std::vector<int32_t> prompt = RandomTokens(kVocab, 6, 1000 + trial);
    std::vector<int32_t> output = RandomTokens(kVocab, static_cast<int>(gen() % 4), 2000 + trial);
    std::vector<int32_t> suppressed;
    SamplingParams p;
    p.temperature = 1.0f;
    if (coin()) p.repetition_penalty = 1.3f;
    if (coin()) p.frequency_penalty = 0.4f;
    if (coin()) {
      for (int k = 0; k < 40; ++k) p.allowed_token_ids.push_back(id());
    }
    if (gen() % 3 == 0) {
      // Choices sharing the output as a prefix, one of them equal to it.
      p.choice_token_ids = {output, output, {id()}};
      p.choice_token_ids[0].push_back(id());
      p.choice_token_ids[0].push_back(id());
      if (p.choice_token_ids[1].empty()) p.choice_token_ids[1].push_back(id());
    }
    if (gen() % 3 == 0) {
      p.constraint = std::make_shared<EveryNth>(1 + static_cast<int32_t>(gen() % 3), output.size(),
                                                coin() ? 4 : 2);
    }
    if (coin()) {
      p.bad_words_token_ids = {{id()}, {output.empty() ? id() : output.back(), id()}, {id(), id()}};
    }
    if (coin()) suppressed = {kEnd, id()};
    if (coin()) {
      for (int k = 0; k < 5; ++k) {
        p.logit_bias.push_back(
            {static_cast<int32_t>(7 * k + trial % 7), static_cast<float>(k) * 7.5f - 15.0f});
      }
    }
    SamplingContext ctx;
    ctx.prompt_tokens = prompt;
    ctx.output_tokens = output;
    ctx.suppressed_tokens = suppressed;
    ctx.end_token = coin() ? kEnd : -1;
    bool sampled = false;
    ExpectEditsAreStepOne(raw, p, ctx, &sampled);
    sampled_trials += sampled;
  }
  // Most requests must leave something to sample, or the comparison says little.
  EXPECT_GE(sampled_trials, 200) << "of 400";
  std::printf("%d of 400 requests had a token to sample\n", sampled_trials);
}

TEST(LogitEditsTest, AGuidedOutputKeepsItsEndTokenThroughAllowedIds) {
  const std::vector<float> raw = RandomLogits(kVocab, LogitKind::kNormal, 1);
  const std::vector<int32_t> output = {10};
  SamplingParams p;
  p.allowed_token_ids = {10, 11};
  p.choice_token_ids = {{10}, {10, 11}};
  SamplingContext ctx;
  ctx.output_tokens = output;
  ctx.end_token = kEnd;
  LogitEdits edits;
  ASSERT_TRUE(BuildLogitEdits(p, ctx, kVocab, &edits).ok());
  ASSERT_EQ(edits.allowed.size(), static_cast<size_t>((kVocab + 63) / 64));
  std::vector<float> edited = raw;
  ApplyLogitEdits(edits, absl::MakeSpan(edited));
  for (int32_t t = 0; t < kVocab; ++t) {
    if (t == kEnd || t == 11) {
      EXPECT_EQ(edited[t], raw[t]) << t;
    } else {
      EXPECT_EQ(edited[t], -INFINITY) << t;
    }
  }
  ExpectEditsAreStepOne(raw, p, ctx);
}

TEST(LogitEditsTest, IdsPastAConstraintsBitmaskAreMasked) {
  const std::vector<float> raw = RandomLogits(kVocab, LogitKind::kNormal, 2);
  SamplingParams p;
  p.constraint = std::make_shared<EveryNth>(1, 0, 2);  // ids 0-127 only
  LogitEdits edits;
  ASSERT_TRUE(BuildLogitEdits(p, SamplingContext(), kVocab, &edits).ok());
  std::vector<float> edited = raw;
  ApplyLogitEdits(edits, absl::MakeSpan(edited));
  EXPECT_EQ(edited[127], raw[127]);
  EXPECT_EQ(edited[128], -INFINITY);
  EXPECT_EQ(edited[kVocab - 1], -INFINITY);
}

TEST(LogitEditsTest, BiasAddsAfterTheMasks) {
  std::vector<float> raw(kVocab, 1.0f);
  SamplingParams p;
  p.bad_words_token_ids = {{5}};
  p.logit_bias = {{5, 50.0f}, {6, -3.0f}};
  LogitEdits edits;
  ASSERT_TRUE(BuildLogitEdits(p, SamplingContext(), kVocab, &edits).ok());
  EXPECT_TRUE(edits.allowed.empty()) << "no allow mask without allowed ids or guidance";
  ApplyLogitEdits(edits, absl::MakeSpan(raw));
  EXPECT_EQ(raw[5], -INFINITY) << "-inf stays -inf";
  EXPECT_EQ(raw[6], -2.0f);
}

TEST(LogitEditsTest, AnyTokenLeftCountsWhatMasksAndBansSpare) {
  LogitEdits edits;
  EXPECT_TRUE(AnyTokenLeft(edits, kVocab));
  EXPECT_FALSE(AnyTokenLeft(edits, 0));
  for (int32_t t = 0; t < kVocab; ++t) edits.banned.push_back(t);
  edits.banned.push_back(3);  // repeats count once
  EXPECT_FALSE(AnyTokenLeft(edits, kVocab));
  edits.banned.pop_back();
  edits.banned.pop_back();  // kVocab - 1 is free again
  EXPECT_TRUE(AnyTokenLeft(edits, kVocab));
  // An allow mask: its set bits past the vocabulary are not tokens.
  edits.banned.clear();
  edits.allowed.assign((kVocab + 63) / 64, 0);
  edits.allowed.back() = ~uint64_t{0} << (kVocab % 64);
  EXPECT_FALSE(AnyTokenLeft(edits, kVocab));
  edits.allowed[1] |= uint64_t{1} << 5;  // token 69
  EXPECT_TRUE(AnyTokenLeft(edits, kVocab));
  edits.banned = {69, 69};
  EXPECT_FALSE(AnyTokenLeft(edits, kVocab));
}

TEST(LogitEditsTest, CheckSomeTokenPossibleNamesWhatRemovedThem) {
  SamplingParams p;
  SamplingContext ctx;
  EXPECT_TRUE(CheckSomeTokenPossible(p, ctx, kVocab).ok());
  p.allowed_token_ids = {7, 8};
  p.bad_words_token_ids = {{7}, {8}};
  const absl::Status none = CheckSomeTokenPossible(p, ctx, kVocab);
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(none.message(),
            "no token can be sampled: allowed_token_ids and bad_words leave no token of the "
            "vocabulary to choose from");
  // The host sampler fails such a row with the same code.
  const std::vector<float> logits(kVocab, 0.0f);
  SamplerScratch scratch;
  EXPECT_EQ(SamplingDistribution(logits, p, ctx, scratch).status().code(), none.code());
  p.bad_words_token_ids = {{7}, {3, 8}};  // 8 is banned only after 3
  EXPECT_TRUE(CheckSomeTokenPossible(p, ctx, kVocab).ok());
  // min_new_tokens suppresses the end token, the only one allowed.
  p = SamplingParams();
  p.allowed_token_ids = {2};
  const std::vector<int32_t> suppressed = {2};
  ctx.suppressed_tokens = suppressed;
  EXPECT_NE(CheckSomeTokenPossible(p, ctx, kVocab).message().find("min_new_tokens"),
            std::string::npos);
}

TEST(LogitEditsTest, ErrorsNameTheProblem) {
  SamplingParams p;
  const std::vector<int32_t> suppressed = {kVocab};
  SamplingContext ctx;
  ctx.suppressed_tokens = suppressed;
  LogitEdits edits;
  const absl::Status bad_id = BuildLogitEdits(p, ctx, kVocab, &edits);
  EXPECT_EQ(bad_id.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_id.message().find("suppressed_tokens[0] = 200"), std::string::npos) << bad_id;

  p.constraint = std::make_shared<EveryNth>(1, 0, 4);
  const std::vector<int32_t> output = {1, 2};
  SamplingContext past;
  past.output_tokens = output;
  EXPECT_EQ(BuildLogitEdits(p, past, kVocab, &edits).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace blossom
