// Sample(): the draw (frequencies against test_util.h's reference distribution), the per-request
// generator, the logprobs, errors and production-size rows. Steps 1-8 on their own, survivor by
// survivor, are logits_processors_test's.
#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/sampling/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Log-softmax in double, for the logprobs tests.
std::vector<double> ReferenceLogSoftmax(const std::vector<float>& raw) {
  double max_x = -std::numeric_limits<double>::infinity();
  for (float v : raw) max_x = std::max(max_x, static_cast<double>(v));
  double total = 0.0;
  for (float v : raw) total += std::exp(static_cast<double>(v) - max_x);
  std::vector<double> out;
  for (float v : raw) out.push_back(static_cast<double>(v) - max_x - std::log(total));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Sampling statistics: empirical frequencies against the reference distribution.
// Pearson's chi-square over buckets: every token expected at least kMinExpected times is its own
// bucket, the others share one. Returns {chi2, degrees of freedom}.
std::pair<double, int> ChiSquare(const std::map<int32_t, double>& dist,
                                 const std::map<int32_t, int>& counts, int draws) {
  constexpr double kMinExpected = 20.0;
  double chi2 = 0.0, rest_expected = 0.0, rest_observed = 0.0;
  int buckets = 0;
  for (const auto& kv : dist) {
    const double expected = kv.second * draws;
    const auto it = counts.find(kv.first);
    const double observed = it == counts.end() ? 0.0 : it->second;
    if (expected < kMinExpected) {
      rest_expected += expected;
      rest_observed += observed;
      continue;
    }
    chi2 += (observed - expected) * (observed - expected) / expected;
    ++buckets;
  }
  if (rest_expected > 0.0) {
    chi2 += (rest_observed - rest_expected) * (rest_observed - rest_expected) / rest_expected;
    ++buckets;
  }
  return {chi2, buckets - 1};
}

struct StatCase {
  std::string name;
  std::vector<float> logits;
  SamplingParams params;
  int draws;
};

TEST(SamplerStatisticsTest, FrequenciesMatchDistribution) {
  std::vector<StatCase> cases;
  const std::vector<float> v7 = RandomLogits(7, LogitKind::kNormal, 77);
  const std::vector<float> v50000 = RandomLogits(50000, LogitKind::kNormal, 77);
  // Mass spread over a few tokens in different 1024-token blocks of the dense draw, plus a
  // low floor everywhere else.
  std::vector<float> spiky(5000, -4.0f);
  spiky[3] = 2.0f;
  spiky[1500] = 1.0f;
  spiky[2047] = 1.5f;
  spiky[2048] = 0.2f;
  spiky[4999] = 0.5f;
  {
    SamplingParams p;
    cases.push_back({"plain_v7", v7, p, 100000});
  }
  {
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_k = 5;
    cases.push_back({"top_k_v7", v7, p, 100000});
  }
  {
    SamplingParams p;
    p.temperature = 1.7f;
    p.top_p = 0.8f;
    p.min_p = 0.05f;
    cases.push_back({"top_p_min_p_v7", v7, p, 100000});
  }
  {
    SamplingParams p;
    cases.push_back({"dense_blocks_v5000", spiky, p, 100000});
  }
  {
    SamplingParams p;
    p.top_p = 0.95f;
    cases.push_back({"dense_top_p_v5000", spiky, p, 30000});
  }
  {
    SamplingParams p;
    p.top_k = 12;
    p.typical_p = 0.9f;
    cases.push_back({"top_k_typical_v50000", v50000, p, 10000});
  }
  {
    SamplingParams p;
    p.temperature = 0.4f;
    p.top_p = 0.9f;
    cases.push_back({"top_p_v50000", v50000, p, 5000});
  }
  SamplerScratch scratch;
  for (const StatCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::map<int32_t, double> dist;
    for (const TokenProbability& t : ReferenceDistribution(c.logits, c.params, {}, {}, {}).probs) {
      dist[t.token] = t.probability;
    }
    ASSERT_GE(dist.size(), 2u);
    RequestRng rng(uint64_t{12345});
    std::map<int32_t, int> counts;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < c.draws; ++i) {
      absl::StatusOr<SampleResult> r = Sample(c.logits, c.params, SamplingContext(), rng, scratch);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(dist.count(r->token), 1u) << "sampled a filtered-out token " << r->token;
      counts[r->token]++;
    }
    // The run is deterministic (fixed seed), so this guards against biased draws, not luck:
    // the bound is the 99.99th percentile of chi-square for these degrees of freedom (Wilson-
    // Hilferty approximation).
    const std::pair<double, int> chi2 = ChiSquare(dist, counts, c.draws);
    const double k = chi2.second;
    const double z = 3.719;  // 99.99th percentile of the standard normal
    const double bound = k * std::pow(1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k)), 3);
    std::printf("%s: chi2 = %.2f with %d degrees of freedom (bound %.1f), %d draws in %.0f ms\n",
                c.name.c_str(), chi2.first, chi2.second, bound, c.draws,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count());
    ASSERT_GE(chi2.second, 1);
    EXPECT_LT(chi2.first, bound);
  }
}

// ---------------------------------------------------------------------------------------------
// Determinism and the per-request generator.
std::vector<int32_t> SampleSequence(const std::vector<float>& logits, const SamplingParams& p,
                                    RequestRng& rng, SamplerScratch& scratch, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<SampleResult> r = Sample(logits, p, SamplingContext(), rng, scratch);
    EXPECT_TRUE(r.ok());
    out.push_back(r->token);
  }
  return out;
}

TEST(RequestRngTest, SameSeedSameSequenceIndependentOfOtherRequests) {
  const std::vector<float> logits_a = RandomLogits(1000, LogitKind::kNormal, 5);
  const std::vector<float> logits_b = RandomLogits(50000, LogitKind::kPeaked, 6);
  SamplingParams pa;
  pa.temperature = 1.2f;
  pa.seed = 42;
  SamplingParams pb;
  pb.top_p = 0.7f;
  pb.repetition_penalty = 1.3f;
  pb.seed = 7;

  SamplerScratch alone_scratch;
  RequestRng alone(pa.seed);
  const std::vector<int32_t> expected = SampleSequence(logits_a, pa, alone, alone_scratch, 300);

  // The same request interleaved with another request that shares the scratch and draws a
  // varying number of tokens in between.
  SamplerScratch shared;
  RequestRng a(pa.seed), b(pb.seed);
  std::vector<int32_t> interleaved;
  const std::vector<int32_t> history = {1, 2, 3, 3};
  for (int i = 0; i < 300; ++i) {
    for (int j = 0; j < i % 3; ++j) {
      ASSERT_TRUE(Sample(logits_b, pb, SamplingContext{history, history, {}}, b, shared).ok());
    }
    absl::StatusOr<SampleResult> r = Sample(logits_a, pa, SamplingContext(), a, shared);
    ASSERT_TRUE(r.ok());
    interleaved.push_back(r->token);
  }
  EXPECT_EQ(interleaved, expected);

  RequestRng other(uint64_t{43});
  EXPECT_NE(SampleSequence(logits_a, pa, other, shared, 300), expected);
}

TEST(RequestRngTest, UnseededReportsAReproducibleSeed) {
  RequestRng first(absl::nullopt), second(absl::nullopt);
  EXPECT_NE(first.seed(), second.seed());  // 2^-64 chance of a false failure
  RequestRng replay(first.seed());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(first.Uniform(), replay.Uniform());
}

TEST(RequestRngTest, UniformIsTopBitsOfMt19937_64) {
  RequestRng rng(uint64_t{5489});
  std::mt19937_64 engine(5489);
  double sum = 0.0;
  for (int i = 0; i < 100000; ++i) {
    const double u = rng.Uniform();
    ASSERT_EQ(u, static_cast<double>(engine() >> 11) / 9007199254740992.0);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.01);
}

TEST(SamplerTest, GreedyTiesGoToLowestIdAndDoNotAdvanceRng) {
  SamplerScratch scratch;
  SamplingParams p;
  p.temperature = 0.0f;
  struct Case {
    std::vector<float> logits;
    int32_t want;
  };
  const std::vector<Case> cases = {
      {{1, 3, 3, 2}, 1}, {{0, 0, 0}, 0},     {{-kInf, -1, -1}, 1},
      {{5}, 0},          {{-2, 7, 7, 7}, 1}, {{-kInf, -kInf, 0}, 2},
  };
  for (const Case& c : cases) {
    RequestRng rng(uint64_t{1});
    absl::StatusOr<SampleResult> r = Sample(c.logits, p, SamplingContext(), rng, scratch);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->token, c.want);
    RequestRng fresh(uint64_t{1});
    EXPECT_EQ(rng.Uniform(), fresh.Uniform());
  }
  // Suppressing the maximum moves greedy to the next one; penalties apply under greedy too.
  RequestRng rng(uint64_t{1});
  const std::vector<int32_t> eos = {1};
  absl::StatusOr<SampleResult> r =
      Sample({1, 3, 3, 2}, p, SamplingContext{{}, {}, eos}, rng, scratch);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token, 2);
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> seen = {1, 2};
  r = Sample({1, 3, 3, 2}, p, SamplingContext{seen, {}, {}}, rng, scratch);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token, 3);  // 3/2 = 1.5 for tokens 1 and 2; token 3 keeps 2
}

TEST(SamplerTest, ExtremeValuesStayFinite) {
  SamplerScratch scratch;
  RequestRng rng(uint64_t{4});
  const std::vector<int32_t> prompt = {0};
  // A tiny repetition penalty would push token 0 to +inf (10 / 1e-38); it is clamped instead.
  SamplingParams p;
  p.repetition_penalty = 1e-38f;
  p.logprobs = 2;
  absl::StatusOr<std::vector<TokenProbability>> dist =
      SamplingDistribution({10.0f, 0.0f, -1.0f}, p, SamplingContext{prompt, {}, {}}, scratch);
  ASSERT_TRUE(dist.ok()) << dist.status();
  ASSERT_EQ(dist->size(), 1u);
  EXPECT_EQ((*dist)[0].token, 0);
  EXPECT_EQ((*dist)[0].probability, 1.0);
  // Huge finite logits and a tiny temperature: nothing overflows into NaN.
  p = SamplingParams();
  p.temperature = 1e-6f;
  p.top_p = 0.5f;
  p.logprobs = 3;
  absl::StatusOr<SampleResult> r = Sample({3e38f, -3e38f, 3e38f, 0.0f}, p, {}, rng, scratch);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->token, 0);  // tied with token 2; top_p = 0.5 keeps the lower id only
  EXPECT_NEAR(r->logprob, -std::log(2.0), 1e-6);
  ASSERT_EQ(r->top.size(), 3u);
  EXPECT_EQ(r->top[2].token, 3);
  EXPECT_TRUE(std::isfinite(r->top[2].logprob));
  EXPECT_LT(r->top[2].logprob, -1e38f);
  p.logprobs = 4;  // -3e38 - 3e38 overflows to -inf in float: clamped
  r = Sample({3e38f, -3e38f, 3e38f, 0.0f}, p, {}, rng, scratch);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->top.size(), 4u);
  EXPECT_EQ(r->top[3].token, 1);
  EXPECT_EQ(r->top[3].logprob, -FLT_MAX);
}

TEST(SamplerTest, VocabularyOfOne) {
  SamplerScratch scratch;
  RequestRng rng(uint64_t{3});
  SamplingParams p;
  p.logprobs = 5;
  p.top_p = 0.1f;
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<SampleResult> r = Sample({0.3f}, p, SamplingContext(), rng, scratch);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->token, 0);
    EXPECT_EQ(r->logprob, 0.0f);
    ASSERT_EQ(r->top.size(), 1u);
    EXPECT_EQ(r->top[0].token, 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Logprobs: raw log-softmax, independent of the processing.
TEST(SamplerLogprobsTest, MatchReferenceLogSoftmaxAndOrdering) {
  SamplerScratch scratch;
  for (int32_t vocab : {2, 7, 50000}) {
    for (LogitKind kind : {LogitKind::kNormal, LogitKind::kQuantized, LogitKind::kWithMasked}) {
      SCOPED_TRACE(absl::StrCat("vocab=", vocab, " kind=", static_cast<int>(kind)));
      const std::vector<float> logits = RandomLogits(vocab, kind, 99);
      const std::vector<double> ref = ReferenceLogSoftmax(logits);
      // Reference top-n: full sort by (logprob desc, id asc), finite only.
      std::vector<int32_t> order;
      for (int32_t i = 0; i < vocab; ++i) {
        if (std::isfinite(logits[i])) order.push_back(i);
      }
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
      });
      for (int32_t n : {-1, 0, 1, 5, 20}) {
        for (float temperature : {0.0f, 0.5f, 1.0f}) {
          SamplingParams p;
          p.temperature = temperature;
          p.repetition_penalty = 1.4f;  // processing must not change the reported logprobs
          p.top_k = 3;
          p.logprobs = n;
          RequestRng rng(uint64_t{8});
          const std::vector<int32_t> history = {0, 1, 1};
          absl::StatusOr<SampleResult> r =
              Sample(logits, p, SamplingContext{history, history, {}}, rng, scratch);
          ASSERT_TRUE(r.ok()) << r.status();
          if (n < 0) {
            EXPECT_TRUE(r->top.empty());
            continue;
          }
          EXPECT_NEAR(r->logprob, ref[r->token], 1e-5);
          const size_t want_size = std::min(order.size(), static_cast<size_t>(n));
          ASSERT_EQ(r->top.size(), want_size);
          for (size_t j = 0; j < want_size; ++j) {
            EXPECT_EQ(r->top[j].token, order[j]);
            EXPECT_NEAR(r->top[j].logprob, ref[order[j]], 1e-5);
          }
        }
      }
    }
  }
}

TEST(SamplerLogprobsTest, TiesInTopListedByLowestId) {
  SamplerScratch scratch;
  RequestRng rng(uint64_t{1});
  SamplingParams p;
  p.logprobs = 4;
  absl::StatusOr<SampleResult> r =
      Sample({1, 2, 2, -kInf, 2, 1}, p, SamplingContext(), rng, scratch);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->top.size(), 4u);
  EXPECT_EQ(r->top[0].token, 1);
  EXPECT_EQ(r->top[1].token, 2);
  EXPECT_EQ(r->top[2].token, 4);
  EXPECT_EQ(r->top[3].token, 0);
  EXPECT_EQ(r->top[0].logprob, r->top[2].logprob);
}

// RawLogprobs (prompt logprobs): the scored token's logprob and rank against a full sort.
TEST(RawLogprobsTest, LogprobRankAndTopAgainstReference) {
  for (LogitKind kind : {LogitKind::kNormal, LogitKind::kQuantized, LogitKind::kWithMasked}) {
    const std::vector<float> logits = RandomLogits(5000, kind, 7);
    const std::vector<double> ref = ReferenceLogSoftmax(logits);
    for (int32_t token : {0, 17, 2500, 4999}) {
      SCOPED_TRACE(absl::StrCat("kind=", static_cast<int>(kind), " token=", token));
      absl::StatusOr<SampleResult> r = RawLogprobs(logits, token, 3);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->token, token);
      int32_t at_least = 0;
      for (float v : logits) at_least += v >= logits[token];
      EXPECT_EQ(r->rank, at_least);
      if (std::isfinite(logits[token])) {
        EXPECT_NEAR(r->logprob, ref[token], 1e-5);
      } else {
        EXPECT_EQ(r->logprob, -FLT_MAX);  // a masked token: clamped, still JSON-representable
      }
      ASSERT_EQ(r->top.size(), 3u);
      // The top list's first entry ranks as the number of tokens tied with it at the maximum.
      absl::StatusOr<SampleResult> best = RawLogprobs(logits, r->top[0].token, 0);
      ASSERT_TRUE(best.ok());
      const float max = logits[r->top[0].token];
      EXPECT_EQ(best->rank, std::count(logits.begin(), logits.end(), max));
      EXPECT_TRUE(best->top.empty());
    }
  }
}

TEST(RawLogprobsTest, TiedTokensShareTheWorseRank) {
  const std::vector<float> logits = {1, 2, 2, -kInf, 2, 1};
  const std::vector<int32_t> want_rank = {5, 3, 3, 6, 3, 5};
  for (int32_t token = 0; token < 6; ++token) {
    absl::StatusOr<SampleResult> r = RawLogprobs(logits, token, 0);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->rank, want_rank[token]) << "token " << token;
  }
}

TEST(RawLogprobsTest, BadInputsAreStatuses) {
  EXPECT_EQ(RawLogprobs({1, 2}, 2, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RawLogprobs({1, 2}, -1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RawLogprobs({1, std::nanf("")}, 0, 0).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(RawLogprobs({1, kInf}, 0, 0).status().code(), absl::StatusCode::kInternal);
}

// ---------------------------------------------------------------------------------------------
// Errors.
TEST(SamplerErrorTest, BadInputsAreStatusesNotCrashes) {
  SamplerScratch scratch;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SamplingParams sampled;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const std::vector<int32_t> out_of_range = {0, 9};
  const std::vector<int32_t> negative = {-1};
  const std::vector<int32_t> all = {0, 1, 2};
  struct Case {
    std::string name;
    std::vector<float> logits;
    SamplingParams params;
    SamplingContext ctx;
    absl::StatusCode code;
    std::string message;
  };
  SamplingParams bad_params;
  bad_params.top_p = nan;
  const std::vector<Case> cases = {
      {"nan", {0, 1, 2, nan}, sampled, {}, absl::StatusCode::kInternal, "logits[3] is nan"},
      {"nan_greedy", {nan, 1}, greedy, {}, absl::StatusCode::kInternal, "logits[0]"},
      {"plus_inf", {0, kInf}, sampled, {}, absl::StatusCode::kInternal, "logits[1] is inf"},
      {"empty", {}, sampled, {}, absl::StatusCode::kInvalidArgument, "empty"},
      {"bad_params", {0, 1}, bad_params, {}, absl::StatusCode::kInvalidArgument, "top_p"},
      {"prompt_out_of_range",
       {0, 1, 2},
       sampled,
       {out_of_range, {}, {}},
       absl::StatusCode::kInvalidArgument,
       "prompt_tokens[1] = 9"},
      {"output_negative",
       {0, 1, 2},
       sampled,
       {{}, negative, {}},
       absl::StatusCode::kInvalidArgument,
       "output_tokens[0] = -1"},
      {"suppressed_out_of_range",
       {0, 1, 2},
       sampled,
       {{}, {}, out_of_range},
       absl::StatusCode::kInvalidArgument,
       "suppressed_tokens[1]"},
      {"all_suppressed",
       {0, 1, 2},
       sampled,
       {{}, {}, all},
       absl::StatusCode::kFailedPrecondition,
       "every logit is -inf"},
      {"all_suppressed_greedy",
       {0, 1, 2},
       greedy,
       {{}, {}, all},
       absl::StatusCode::kFailedPrecondition,
       "every logit is -inf"},
      {"all_minus_inf",
       {-kInf, -kInf},
       sampled,
       {},
       absl::StatusCode::kFailedPrecondition,
       "every logit"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RequestRng rng(uint64_t{5});
    absl::StatusOr<SampleResult> r = Sample(c.logits, c.params, c.ctx, rng, scratch);
    EXPECT_EQ(r.status().code(), c.code) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message));
    RequestRng fresh(uint64_t{5});
    EXPECT_EQ(rng.Uniform(), fresh.Uniform()) << "an error must not consume a draw";
    EXPECT_EQ(SamplingDistribution(c.logits, c.params, c.ctx, scratch).status().code(), c.code);
  }
  // -inf is a mask, not an error.
  RequestRng rng(uint64_t{5});
  absl::StatusOr<SampleResult> r = Sample({-kInf, 0, -kInf}, sampled, {}, rng, scratch);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token, 1);
}

// ---------------------------------------------------------------------------------------------
// Production-size rows: correctness of the support and a rough per-call cost (printed only).
TEST(SamplerScaleTest, ProductionVocabulary) {
  constexpr int32_t kVocab = 250880;
  const std::vector<float> logits = RandomLogits(kVocab, LogitKind::kNormal, 2024);
  const std::vector<int32_t> history = RandomTokens(kVocab, 2000, 1);
  struct Case {
    std::string name;
    SamplingParams params;
  };
  std::vector<Case> cases;
  {
    SamplingParams p;
    p.temperature = 0.0f;
    cases.push_back({"greedy", p});
  }
  {
    SamplingParams p;
    cases.push_back({"plain", p});
  }
  {
    SamplingParams p;
    p.top_k = 50;
    p.top_p = 0.95f;
    p.repetition_penalty = 1.1f;
    cases.push_back({"top_k_50_top_p", p});
  }
  {
    SamplingParams p;
    p.top_p = 0.9f;  // flat row: most of the vocabulary survives
    cases.push_back({"top_p_0.9_flat", p});
  }
  {
    SamplingParams p;
    p.temperature = 0.3f;
    p.top_p = 0.9f;
    cases.push_back({"top_p_0.9_peaked", p});
  }
  {
    SamplingParams p;
    p.typical_p = 0.9f;
    cases.push_back({"typical_0.9", p});
  }
  {
    SamplingParams p;
    p.min_p = 0.1f;
    p.logprobs = 20;
    cases.push_back({"min_p_logprobs", p});
  }
  SamplerScratch scratch;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RequestRng rng(uint64_t{9});
    constexpr int kCalls = 5;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) {
      absl::StatusOr<SampleResult> r =
          Sample(logits, c.params, SamplingContext{history, history, {}}, rng, scratch);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_GE(r->token, 0);
      ASSERT_LT(r->token, kVocab);
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count() /
        kCalls;
    std::printf("vocab %d, %s: %.3f ms per Sample\n", kVocab, c.name.c_str(), ms);
  }
}

}  // namespace
}  // namespace blossom
