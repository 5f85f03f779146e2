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
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------------
// Reference implementation: full sorts and explicit loops, written straight from the processing
// order documented in sampler.h (HF warpers / vLLM), with no attempt at speed. Steps 1-3 and the
// scaled logit x = (l - max) / T are computed in fp32 as the sampler specifies them (it orders
// tokens by that fp32 x, ties by id); probabilities and every cumulative sum are in double.
//
// The sampler computes weights with an fp32 exp (relative error ~1e-7), so a decision that
// depends on the probability mass to within kMassEps cannot be pinned down by a double-precision
// reference. Such tokens are reported as `borderline`: their membership is not compared (and is
// counted, so that a test can check that this stays rare).
constexpr double kMassEps = 1e-6;

struct Reference {
  std::vector<TokenProbability> probs;  // survivors by id; empty when every token is masked
  std::set<int32_t> borderline;
};

Reference ReferenceDistribution(const std::vector<float>& raw, const SamplingParams& p,
                                const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& output,
                                const std::vector<int32_t>& suppressed) {
  const int32_t vocab = static_cast<int32_t>(raw.size());
  Reference ref;
  // Steps 1-3.
  std::vector<float> l = raw;
  for (int32_t t : suppressed) l[t] = -kInf;
  if (p.repetition_penalty != 1.0f) {
    std::set<int32_t> distinct(prompt.begin(), prompt.end());
    distinct.insert(output.begin(), output.end());
    for (int32_t t : distinct) {
      l[t] = l[t] > 0.0f ? l[t] / p.repetition_penalty : l[t] * p.repetition_penalty;
    }
  }
  std::map<int32_t, int> counts;
  for (int32_t t : output) counts[t]++;
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (const auto& kv : counts) {
      l[kv.first] -= static_cast<float>(kv.second) * p.frequency_penalty + p.presence_penalty;
    }
  }
  std::vector<int32_t> alive;
  for (int32_t i = 0; i < vocab; ++i) {
    if (l[i] != -kInf) alive.push_back(i);
  }
  if (alive.empty()) return ref;
  // Step 4: greedy.
  if (p.temperature == 0.0f) {
    int32_t best = alive[0];
    for (int32_t i : alive) {
      if (l[i] > l[best]) best = i;
    }
    ref.probs.push_back({best, 1.0});
    return ref;
  }
  // Step 5: top_k on the processed logits keeps ties with the k-th largest value.
  if (p.top_k > 0 && p.top_k < static_cast<int32_t>(alive.size())) {
    std::vector<float> values;
    for (int32_t i : alive) values.push_back(l[i]);
    std::sort(values.begin(), values.end(), std::greater<float>());
    const float kth = values[p.top_k - 1];
    std::vector<int32_t> kept;
    for (int32_t i : alive) {
      if (l[i] >= kth) kept.push_back(i);
    }
    alive = kept;
  }
  // Step 4: temperature.
  float max_l = -kInf;
  for (int32_t i : alive) max_l = std::max(max_l, l[i]);
  std::vector<double> x(vocab, -std::numeric_limits<double>::infinity());
  for (int32_t i : alive) x[i] = static_cast<double>((l[i] - max_l) / p.temperature);
  // Weights below 2^-126.5 of the top token's are 0 in the sampler's fp32 exp (sampler.h).
  {
    const double underflow = -126.5 * std::log(2.0);
    std::vector<int32_t> kept;
    for (int32_t i : alive) {
      if (std::fabs(x[i] - underflow) < 1e-4) ref.borderline.insert(i);
      if (x[i] > underflow) kept.push_back(i);
    }
    alive = kept;
  }
  // Probabilities over ids (indexed by token; 0 elsewhere).
  auto softmax = [&x, vocab](const std::vector<int32_t>& ids) {
    double total = 0.0;
    for (int32_t i : ids) total += std::exp(x[i]);
    std::vector<double> probs(vocab, 0.0);
    for (int32_t i : ids) probs[i] = std::exp(x[i]) / total;
    return probs;
  };
  // Step 6: top_p over (x desc, id asc); keep while the mass before is < top_p.
  if (p.top_p < 1.0f) {
    const std::vector<double> probs = softmax(alive);
    std::vector<int32_t> order = alive;
    std::sort(order.begin(), order.end(),
              [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
    std::vector<int32_t> kept;
    double before = 0.0;
    for (int32_t i : order) {
      if (std::fabs(before - p.top_p) <= kMassEps) ref.borderline.insert(i);
      if (before < p.top_p) kept.push_back(i);
      before += probs[i];
    }
    alive = kept;
  }
  // Step 7: typical_p as HF's TypicalLogitsWarper.
  if (p.typical_p < 1.0f) {
    const std::vector<double> probs = softmax(alive);
    double entropy = 0.0;
    for (int32_t i : alive) entropy -= probs[i] * std::log(probs[i]);
    std::vector<double> score(vocab, 0.0);
    for (int32_t i : alive) score[i] = std::fabs(-std::log(probs[i]) - entropy);
    std::vector<int32_t> order = alive;
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return score[a] < score[b] || (score[a] == score[b] && a < b);
    });
    size_t last = order.size() - 1;  // when the mass is never reached
    bool reached = false;
    double cumulative = 0.0;
    double low = std::numeric_limits<double>::infinity(), high = -low;  // ambiguous thresholds
    for (size_t j = 0; j < order.size(); ++j) {
      cumulative += probs[order[j]];
      if (std::fabs(cumulative - p.typical_p) <= kMassEps) {
        low = std::min(low, score[order[j]]);
        high = std::max(high, score[order[j]]);
      }
      if (cumulative >= p.typical_p && !reached) {
        reached = true;
        last = j;
      }
    }
    const double threshold = score[order[last]];
    low = std::min(low, threshold) - 1e-6;
    high = std::max(high, threshold) + 1e-6;
    std::vector<int32_t> kept;
    for (int32_t i : alive) {
      if (score[i] >= low && score[i] <= high) ref.borderline.insert(i);
      if (score[i] <= threshold) kept.push_back(i);
    }
    alive = kept;
  }
  // Step 8: min_p relative to the most likely survivor.
  if (p.min_p > 0.0f) {
    const std::vector<double> probs = softmax(alive);
    double max_p = 0.0;
    for (int32_t i : alive) max_p = std::max(max_p, probs[i]);
    std::vector<int32_t> kept;
    for (int32_t i : alive) {
      if (std::fabs(probs[i] / max_p - p.min_p) <= 1e-6) ref.borderline.insert(i);
      if (probs[i] >= p.min_p * max_p) kept.push_back(i);
    }
    alive = kept;
  }
  const std::vector<double> probs = softmax(alive);
  std::sort(alive.begin(), alive.end());
  for (int32_t i : alive) ref.probs.push_back({i, probs[i]});
  return ref;
}

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
// Logit generators.
enum class LogitKind { kNormal, kPeaked, kQuantized, kWithMasked };

std::vector<float> RandomLogits(int32_t vocab, LogitKind kind, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, kind == LogitKind::kPeaked ? 4.0f : 1.5f);
  std::vector<float> out(vocab);
  for (float& v : out) v = normal(gen);
  if (kind == LogitKind::kQuantized) {
    // Few distinct values: many ties at every boundary.
    for (float& v : out) v = std::round(v * 2.0f) / 2.0f;
  }
  if (kind == LogitKind::kWithMasked) {
    std::uniform_int_distribution<int> coin(0, 9);
    for (int32_t i = 1; i < vocab; ++i) {
      if (coin(gen) == 0) out[i] = -kInf;  // token 0 stays finite
    }
  }
  return out;
}

std::vector<int32_t> RandomTokens(int32_t vocab, int count, uint32_t seed) {
  std::mt19937 gen(seed);
  // Draw from a small range so tokens repeat (counts > 1 exercise the frequency penalty).
  std::uniform_int_distribution<int32_t> dist(0, std::max(0, std::min(vocab - 1, 30)));
  std::vector<int32_t> out(count);
  for (int32_t& t : out) t = dist(gen);
  return out;
}

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
