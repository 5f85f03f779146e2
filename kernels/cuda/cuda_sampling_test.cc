// GPU sampling against host reference computations: greedy ties, step 1's edits, penalties,
// non-finite rows, exact draws for top-k/top-p/typical-p/min-p over the full BLOOM vocabulary (the host predicts the token from the same Philox
// uniform), empirical frequencies on a small vocabulary, and batch independence.
// Without a visible GPU every test reports SKIPPED with the reason.
#include "kernels/cuda/cuda_sampling.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_sampler_fixture.h"
#include "kernels/cuda/device.h"

namespace blossom {
namespace cuda {
namespace {

class CudaSamplingTest : public CudaSamplerFixture {
 protected:
  // Uploads rows (each of `vocab` entries) and samples them.
  std::vector<int32_t> Sample(const std::vector<float>& host, int64_t vocab,
                              const std::vector<SamplingRow>& rows) {
    std::vector<int32_t> tokens(rows.size(), -7);
    if (!Upload(host)) return tokens;
    absl::Status s = sampler_->Sample(logits_, vocab, rows, tokens.data());
    EXPECT_TRUE(s.ok()) << s;
    last_status_ = s;
    return tokens;
  }

  absl::Status last_status_;
};

// Host prediction of the GPU's draw: same kept set (ties at thresholds kept), same uniform.
// Top-k and top-p give a logit threshold; typical-p and min-p then filter the survivors (in
// double, on x = (logit - max) / t as the GPU computes it in fp32).
int32_t PredictDraw(const std::vector<float>& l, const SamplingRow& p) {
  const int64_t V = l.size();
  const float mx = *std::max_element(l.begin(), l.end());
  std::vector<float> sorted = l;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  float kmin = -INFINITY;
  if (p.top_k > 0 && p.top_k < V) kmin = sorted[p.top_k - 1];
  auto x_of = [&](float v) { return (v - mx) / p.temperature; };
  auto w = [&](float v) { return static_cast<double>(std::exp(x_of(v))); };
  float pmin = kmin;
  if (p.top_p < 1.0f) {
    double z = 0.0;
    for (float v : l)
      if (v >= kmin) z += w(v);
    double cum = 0.0;
    for (float v : sorted) {
      if (v < kmin) break;
      cum += w(v);
      if (cum >= p.top_p * z) {
        pmin = v;
        break;
      }
    }
  }
  std::vector<bool> kept(V);
  for (int64_t i = 0; i < V; ++i) kept[i] = l[i] >= pmin && w(l[i]) > 0.0;
  if (p.typical_p < 1.0f) {
    double z = 0.0, zx = 0.0;
    for (int64_t i = 0; i < V; ++i) {
      if (!kept[i]) continue;
      z += w(l[i]);
      zx += w(l[i]) * x_of(l[i]);
    }
    const double mean = zx / z;
    auto score = [&](int64_t i) { return std::fabs(mean - static_cast<double>(x_of(l[i]))); };
    std::vector<int64_t> order;
    for (int64_t i = 0; i < V; ++i)
      if (kept[i]) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score(a) < score(b); });
    double cum = 0.0, limit = score(order.back());
    for (int64_t i : order) {
      cum += w(l[i]);
      if (cum >= p.typical_p * z) {
        limit = score(i);
        break;
      }
    }
    for (int64_t i : order) kept[i] = score(i) <= limit;
  }
  if (p.min_p > 0.0f) {
    double top = -INFINITY;
    for (int64_t i = 0; i < V; ++i)
      if (kept[i]) top = std::max(top, static_cast<double>(x_of(l[i])));
    const double threshold = top + std::log(static_cast<double>(p.min_p));
    for (int64_t i = 0; i < V; ++i) kept[i] = kept[i] && x_of(l[i]) >= threshold;
  }
  double total = 0.0;
  for (int64_t i = 0; i < V; ++i)
    if (kept[i]) total += w(l[i]);
  const double target = CudaSampler::Uniform(p.seed, p.offset) * total;
  double acc = 0.0;
  int32_t last = -1;
  for (int64_t i = 0; i < V; ++i) {
    if (!kept[i]) continue;
    acc += w(l[i]);
    last = static_cast<int32_t>(i);
    if (target < acc) return last;
  }
  return last;
}

// Draws `per_config` tokens for each of `configs` from the row `l` (seed `seed`, offsets 0, 1,
// ...; one batch a config, through `sample`) and counts those PredictDraw does not predict.
template <typename SampleFn>
int CountMispredictedDraws(const std::vector<float>& l, const std::vector<SamplingRow>& configs,
                           uint64_t seed, int per_config, SampleFn sample) {
  int mismatches = 0;
  for (SamplingRow row : configs) {
    std::vector<SamplingRow> rows;
    std::vector<float> batch;
    for (int off = 0; off < per_config; ++off) {
      row.seed = seed;
      row.offset = static_cast<uint64_t>(off);
      rows.push_back(row);
      batch.insert(batch.end(), l.begin(), l.end());
    }
    const std::vector<int32_t> got = sample(batch, rows);
    for (size_t i = 0; i < rows.size(); ++i) mismatches += got[i] != PredictDraw(l, rows[i]);
  }
  return mismatches;
}

TEST_F(CudaSamplingTest, GreedyTakesTheLowestIdAmongEqualMaxima) {
  std::vector<float> l = RandomLogits(3 * kBloomVocab, 1, 2.0f);
  l[0 * kBloomVocab + 250879] = 50.0f;
  l[1 * kBloomVocab + 1000] = 50.0f;
  l[1 * kBloomVocab + 7] = 50.0f;
  l[2 * kBloomVocab + 0] = 50.0f;
  std::vector<SamplingRow> rows(3);
  for (auto& r : rows) r.temperature = 0.0f;
  EXPECT_EQ(Sample(l, kBloomVocab, rows), (std::vector<int32_t>{250879, 7, 0}));
}

TEST_F(CudaSamplingTest, PenaltiesFollowTheCpuSamplerSemantics) {
  const int64_t V = 16;
  std::vector<float> l(V, 0.0f);
  l[3] = 2.0f;
  l[5] = 1.9f;
  l[9] = -1.0f;
  SamplingRow rep;
  rep.temperature = 0.0f;
  rep.repetition_penalty = 2.0f;  // 3 -> 1.0, 5 stays (not seen), so 5 wins
  rep.prompt_tokens = {3, 3};
  rep.output_tokens = {3};
  SamplingRow freq;
  freq.temperature = 0.0f;
  freq.frequency_penalty = 0.5f;  // 3 appears 3 times: 2 - 1.5 - 0.1 = 0.4 < 1.9
  freq.presence_penalty = 0.1f;
  freq.output_tokens = {3, 3, 3};
  std::vector<float> both(l);
  both.insert(both.end(), l.begin(), l.end());
  EXPECT_EQ(Sample(both, V, {rep, freq}), (std::vector<int32_t>{5, 5}));
  // The penalised logits were written back in place.
  std::vector<float> back(2 * V);
  ASSERT_EQ(cudaMemcpy(back.data(), logits_, back.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_FLOAT_EQ(back[3], 1.0f);
  EXPECT_FLOAT_EQ(back[V + 3], 2.0f - 1.5f - 0.1f);
}

// Step 1's edits (allow mask, bans, then biases) land before the penalties, per row.
TEST_F(CudaSamplingTest, EditsMaskBanAndBiasBeforeThePenalties) {
  const int64_t V = 256;
  std::vector<float> l = RandomLogits(6 * V, 4, 1.0f);
  auto mask_of = [&](std::vector<int32_t> ids) {
    std::vector<uint64_t> words(V / 64, 0);
    for (int32_t t : ids) words[t / 64] |= uint64_t{1} << (t % 64);
    return words;
  };
  const std::vector<uint64_t> only_10_200 = mask_of({10, 200}), only_7 = mask_of({7}),
                              only_3_4 = mask_of({3, 4});
  std::vector<SamplingRow> rows(6);
  for (SamplingRow& row : rows) row.temperature = 0.0f;
  l[0 * V + 200] = 1.0f;
  l[0 * V + 10] = 0.5f;
  l[0 * V + 11] = 9.0f;  // outside the mask
  rows[0].allowed = only_10_200;
  l[1 * V + 30] = 9.0f;
  l[1 * V + 31] = 8.0f;
  rows[1].banned = {30};
  rows[2].bias = {{5, 100.0f}};
  rows[3].allowed = only_7;
  rows[3].banned = {7};  // nothing left
  l[4 * V + 9] = 9.0f;
  rows[4].banned = {9};
  rows[4].bias = {{9, 100.0f}};  // -inf stays -inf
  l[5 * V + 3] = 2.0f;
  l[5 * V + 4] = 1.5f;
  rows[5].allowed = only_3_4;
  rows[5].repetition_penalty = 2.0f;
  rows[5].prompt_tokens = {3};  // 3 -> 1.0 after the mask
  const std::vector<int32_t> got = Sample(l, V, rows);
  EXPECT_EQ(got[0], 200);
  EXPECT_EQ(got[1], 31);
  EXPECT_EQ(got[2], 5);
  EXPECT_EQ(got[3], kNoToken);
  EXPECT_NE(got[4], 9);
  EXPECT_GE(got[4], 0);
  EXPECT_EQ(got[5], 4);
  std::vector<float> back(6 * V);
  ASSERT_EQ(cudaMemcpy(back.data(), logits_, back.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(back[0 * V + 11], -INFINITY) << "masked in place";
  EXPECT_EQ(back[0 * V + 200], 1.0f) << "kept untouched";
  EXPECT_EQ(back[4 * V + 9], -INFINITY);
  EXPECT_FLOAT_EQ(back[2 * V + 5], l[2 * V + 5] + 100.0f);
}

// A NaN or +inf anywhere in a row: the row reports kNonFiniteRow, its neighbours are sampled.
TEST_F(CudaSamplingTest, NonFiniteRowsAreReported) {
  const int64_t V = 1000;
  std::vector<float> l = RandomLogits(3 * V, 6, 1.0f);
  l[0 * V + 999] = NAN;
  l[2 * V + 0] = INFINITY;
  l[1 * V + 123] = 30.0f;
  std::vector<SamplingRow> rows(3);
  rows[0].temperature = 0.0f;
  rows[1].temperature = 0.0f;
  rows[2].temperature = 0.9f;
  EXPECT_EQ(Sample(l, V, rows), (std::vector<int32_t>{kNonFiniteRow, 123, kNonFiniteRow}));

  // Hidden by an edit or a penalty, they still fail their rows (the host checks the raw row):
  // a NaN under the allow mask, a +inf banned, a +inf under the repetition penalty.
  std::vector<float> hidden = RandomLogits(3 * V, 7, 1.0f);
  hidden[0 * V + 500] = NAN;
  hidden[1 * V + 501] = INFINITY;
  hidden[2 * V + 502] = INFINITY;
  std::vector<uint64_t> only_low((V + 63) / 64, 0);
  only_low[0] = ~uint64_t{0};  // ids 0-63
  std::vector<SamplingRow> edited(3);
  for (SamplingRow& row : edited) row.temperature = 0.0f;
  edited[0].allowed = only_low;
  edited[1].banned = {501};
  edited[2].repetition_penalty = 1.5f;
  edited[2].prompt_tokens = {502};
  EXPECT_EQ(Sample(hidden, V, edited),
            (std::vector<int32_t>{kNonFiniteRow, kNonFiniteRow, kNonFiniteRow}));
}

// Typical-p over a row with masked ids: they carry no weight and leave the entropy alone (a
// masked id once made the mean NaN, which kept every token).
TEST_F(CudaSamplingTest, TypicalPIgnoresMaskedTokens) {
  const int64_t V = 8;
  const std::vector<double> probs = {0.5, 0.3, 0.1, 0.05, 0.05, 1e-9, 1e-9};
  std::vector<float> l(V, -INFINITY);  // id 7 masked
  for (size_t i = 0; i < probs.size(); ++i) l[i] = static_cast<float>(std::log(probs[i]));
  const int kDraws = 4000;
  std::vector<SamplingRow> rows(kDraws);
  std::vector<float> batch;
  for (int i = 0; i < kDraws; ++i) {
    rows[i].typical_p = 0.5f;  // keeps ids 1 and 0 (see FrequenciesFollowTheFilteredDistribution)
    rows[i].seed = 5;
    rows[i].offset = i;
    batch.insert(batch.end(), l.begin(), l.end());
  }
  int outside = 0;
  for (int32_t t : Sample(batch, V, rows)) outside += t == 0 || t == 1 ? 0 : 1;
  EXPECT_EQ(outside, 0) << "of " << kDraws << " draws";
}

// Malformed edits are refused before anything runs.
TEST_F(CudaSamplingTest, RefusesMalformedEdits) {
  const int64_t V = 128;
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, V * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, V * sizeof(float)), cudaSuccess);
  const std::vector<uint64_t> one_word = {~uint64_t{0}};
  SamplingRow short_mask, bad_ban, bad_bias, twice_biased;
  short_mask.allowed = one_word;  // needs 2 words
  bad_ban.banned = {static_cast<int32_t>(V)};
  bad_bias.bias = {{3, NAN}};
  twice_biased.bias = {{3, 1.0f}, {5, 1.0f}, {3, 2.0f}};
  int32_t token = 0;
  for (const SamplingRow& row : {short_mask, bad_ban, bad_bias, twice_biased}) {
    EXPECT_EQ(sampler_->Sample(d, V, {row}, &token).code(), absl::StatusCode::kInvalidArgument);
  }
  cudaFree(d);
}

TEST_F(CudaSamplingTest, DrawsMatchTheHostPredictionOverTheFullVocabulary) {
  // Scale 4: the mass sits on the top few hundred ids, as with a trained model's logits.
  std::vector<float> l = RandomLogits(kBloomVocab, 2, 4.0f);
  auto config = [](float temperature, int32_t top_k, float top_p, float typical_p = 1.0f,
                   float min_p = 0.0f) {
    SamplingRow r;
    r.temperature = temperature;
    r.top_k = top_k;
    r.top_p = top_p;
    r.typical_p = typical_p;
    r.min_p = min_p;
    return r;
  };
  const std::vector<SamplingRow> configs = {
      config(1.0f, 0, 1.0f),               // plain temperature
      config(0.7f, 50, 1.0f),              // top-k
      config(1.3f, 0, 0.9f),               // top-p
      config(0.8f, 40, 0.5f),              // both
      config(1.0f, 1, 1.0f),               // top-k 1 = greedy
      config(1.0f, 0, 1.0f, 0.6f),         // typical-p
      config(1.2f, 0, 1.0f, 1.0f, 0.05f),  // min-p
      config(0.9f, 200, 0.95f, 0.8f, 0.02f),  // all four filters
  };
  const int mismatches = CountMispredictedDraws(l, configs, 1234, 16, [this](const auto& b, const auto& r) {
    return Sample(b, kBloomVocab, r);
  });
  // Both locate the draw with double sums; the GPU's top-p and typical-p masses are float
  // histograms, so a boundary within rounding may keep another set: more than three of 128
  // means a real difference.
  EXPECT_LE(mismatches, 3) << "of 128 draws";
}

// A flat distribution (normal(0, 1) logits: every one of the 250,880 ids holds ~4e-6 of the
// mass), where the draw's sums decide: a token's weight is ~0.02 against a running sum near
// the total, ~4,000. With the sums in fp32 (before 2026-11-29), 2.6% of such draws took another
// token than the exact inverse CDF (a CPU emulation of the kernel), ~5 of these 192; in double,
// only the weights' own rounding (expf against std::exp, ~1e-7 each) can move a boundary, by
// ~5e-5 of a token. No top-p or typical-p here: their float mass histograms may keep a tail
// token more or less than the host, and with this many near-equal tokens that shifts the draw.
TEST_F(CudaSamplingTest, FlatDistributionDrawsMatchTheExactInverseCdf) {
  std::vector<float> l = RandomLogits(kBloomVocab, 5, 1.0f);
  std::vector<SamplingRow> configs(4);
  configs[0].temperature = 1.0f;
  configs[1].temperature = 0.8f;
  configs[2].temperature = 1.3f;
  configs[3].temperature = 1.0f;
  configs[3].min_p = 0.02f;  // keeps x >= max - 3.9: about 60,000 ids
  const int mismatches = CountMispredictedDraws(l, configs, 77, 48, [this](const auto& b, const auto& r) {
    return Sample(b, kBloomVocab, r);
  });
  EXPECT_LE(mismatches, 1) << "of 192 draws";
}

TEST_F(CudaSamplingTest, FrequenciesFollowTheFilteredDistribution) {
  const int64_t V = 8;
  // probabilities 0.5, 0.3, 0.1, 0.05, 0.05 and three (almost) impossible ids
  const std::vector<double> probs = {0.5, 0.3, 0.1, 0.05, 0.05, 1e-9, 1e-9, 1e-9};
  std::vector<float> l(V);
  for (int64_t i = 0; i < V; ++i) l[i] = static_cast<float>(std::log(probs[i]));
  struct Case {
    int32_t top_k;
    float top_p;
    std::vector<double> expected;
    float typical_p = 1.0f;
    float min_p = 0.0f;
  };
  // Typical-p 0.5: H = 1.2376 nats; |-log p - H| is 0.545, 0.034, 1.065, 1.758, 1.758 for the
  // first five ids, so the order is 1 (0.3), 0 (0.5): the mass reaches 0.5 at id 0 and both stay.
  // Min-p 0.15: p >= 0.075, so ids 0-2 stay.
  const Case cases[] = {
      {0, 1.0f, {0.5, 0.3, 0.1, 0.05, 0.05, 0, 0, 0}},
      {2, 1.0f, {0.625, 0.375, 0, 0, 0, 0, 0, 0}},
      {0, 0.85f, {0.5 / 0.9, 0.3 / 0.9, 0.1 / 0.9, 0, 0, 0, 0, 0}},
      {0, 1.0f, {0.625, 0.375, 0, 0, 0, 0, 0, 0}, 0.5f},
      {0, 1.0f, {0.5 / 0.9, 0.3 / 0.9, 0.1 / 0.9, 0, 0, 0, 0, 0}, 1.0f, 0.15f},
  };
  const int kDraws = 20000;
  for (const Case& c : cases) {
    std::vector<SamplingRow> rows(kDraws);
    std::vector<float> batch;
    batch.reserve(kDraws * V);
    for (int i = 0; i < kDraws; ++i) {
      rows[i].top_k = c.top_k;
      rows[i].top_p = c.top_p;
      rows[i].typical_p = c.typical_p;
      rows[i].min_p = c.min_p;
      rows[i].seed = 99;
      rows[i].offset = i;
      batch.insert(batch.end(), l.begin(), l.end());
    }
    std::vector<int32_t> got = Sample(batch, V, rows);
    std::vector<double> freq(V, 0.0);
    for (int32_t t : got) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, V);
      freq[t] += 1.0 / kDraws;
    }
    for (int64_t i = 0; i < V; ++i) {
      SCOPED_TRACE(testing::Message() << "top_k " << c.top_k << ", top_p " << c.top_p
                                      << ", typical_p " << c.typical_p << ", min_p " << c.min_p);
      if (c.expected[i] == 0) {
        EXPECT_EQ(freq[i], 0.0) << "filtered id " << i << " was drawn";
      } else {
        EXPECT_NEAR(freq[i], c.expected[i], 0.015) << "id " << i;
      }
    }
  }
}

TEST_F(CudaSamplingTest, ARowsTokenDoesNotDependOnItsBatch) {
  std::vector<float> l = RandomLogits(4 * kBloomVocab, 3, 2.0f);
  std::vector<SamplingRow> rows(4);
  for (int i = 0; i < 4; ++i) {
    rows[i].temperature = 0.9f;
    rows[i].top_k = 100;
    rows[i].top_p = 0.95f;
    rows[i].seed = 77 + i;
    rows[i].offset = 5;
  }
  std::vector<int32_t> batched = Sample(l, kBloomVocab, rows);
  for (int i = 0; i < 4; ++i) {
    std::vector<float> one(l.begin() + i * kBloomVocab, l.begin() + (i + 1) * kBloomVocab);
    EXPECT_EQ(Sample(one, kBloomVocab, {rows[i]})[0], batched[i]) << "row " << i;
  }
}

// An all-masked row gets kNoToken; the rows beside it are sampled as if it were not there.
TEST_F(CudaSamplingTest, AllMaskedRowFailsOnlyItself) {
  std::vector<float> l(300, 0.0f);
  for (int i = 0; i < 100; ++i) l[100 + i] = -INFINITY;  // row 1
  l[17] = 5.0f;                                          // row 0's argmax
  l[200 + 42] = 5.0f;                                    // row 2's argmax
  std::vector<SamplingRow> rows(3);
  for (SamplingRow& row : rows) row.temperature = 0.0f;
  const std::vector<int32_t> tokens = Sample(l, 100, rows);
  EXPECT_EQ(tokens, (std::vector<int32_t>{17, kNoToken, 42}));
}

// Temperatures down to the smallest denormal pass validation; they must sample like greedy
// (the CPU sampler divides, so its weights are 1 for the maximum and 0 elsewhere).
TEST_F(CudaSamplingTest, TinyTemperatureSamplesTheMaximum) {
  std::vector<float> l(1000);
  for (int i = 0; i < 1000; ++i) l[i] = static_cast<float>((i * 37) % 101) * 0.01f;
  l[613] = 3.0f;
  for (float t : {1e-40f, 1e-30f, 1e-8f}) {
    SamplingRow row;
    row.temperature = t;
    row.seed = 7;
    EXPECT_EQ(Sample(l, 1000, {row})[0], 613) << "temperature " << t;
  }
}

// A vocabulary that is not a multiple of 4: rows start off 16-byte alignment, so the scan takes
// its scalar path; greedy rows still give the lowest id of the maximum, at either end too.
TEST_F(CudaSamplingTest, GreedyOnAnOddVocabulary) {
  const int64_t V = 1001;
  std::vector<float> l = RandomLogits(4 * V, 9, 2.0f);
  l[0 * V + 1000] = 50.0f;  // the last id
  l[1 * V + 0] = 50.0f;     // the first
  l[2 * V + 500] = 50.0f;
  l[2 * V + 499] = 50.0f;   // a tie: the lower id
  std::vector<SamplingRow> rows(4);
  for (SamplingRow& row : rows) row.temperature = 0.0f;
  const int32_t row3 = static_cast<int32_t>(
      std::max_element(l.begin() + 3 * V, l.begin() + 4 * V) - (l.begin() + 3 * V));
  EXPECT_EQ(Sample(l, V, rows), (std::vector<int32_t>{1000, 0, 499, row3}));
}

// A draw is always some thread's: 65,536 draws over BLOOM's vocabulary at temperature 1 with
// no filter never give a token of negligible probability. (The draw once let rounding leave a
// target between two threads' ranges, about once in 10^4 draws, and then fell back to the
// row's last token: here id 250879, whose logit of -20 makes it ~1e-14 likely.)
TEST_F(CudaSamplingTest, DrawsNeverFallBetweenThreadsToTheLastToken) {
  std::vector<float> l = RandomLogits(kBloomVocab, 21, 1.0f);
  l[kBloomVocab - 1] = -20.0f;
  constexpr int kRows = 256, kCalls = 256;
  std::vector<float> batch;
  batch.reserve(static_cast<size_t>(kRows) * kBloomVocab);
  for (int r = 0; r < kRows; ++r) batch.insert(batch.end(), l.begin(), l.end());
  std::vector<SamplingRow> rows(kRows);
  for (int r = 0; r < kRows; ++r) {
    rows[r].temperature = 1.0f;
    rows[r].seed = 99;
    rows[r].offset = static_cast<uint64_t>(r);
  }
  std::vector<int32_t> got = Sample(batch, kBloomVocab, rows);  // uploads the rows once
  ASSERT_TRUE(last_status_.ok()) << last_status_;
  int last_token = 0, invalid = 0;
  std::vector<int32_t> tokens(kRows);
  for (int call = 0; call < kCalls; ++call) {
    if (call > 0) {
      for (int r = 0; r < kRows; ++r) rows[r].offset = static_cast<uint64_t>(call) * kRows + r;
      // The same device rows: nothing edits them (no penalty, no edit).
      ASSERT_TRUE(sampler_->Sample(logits_, kBloomVocab, rows, tokens.data()).ok());
      got = tokens;
    }
    for (int32_t t : got) {
      last_token += t == kBloomVocab - 1;
      invalid += t < 0 || t >= kBloomVocab;
    }
  }
  EXPECT_EQ(invalid, 0);
  EXPECT_EQ(last_token, 0) << "of " << kRows * kCalls << " draws";
}

}  // namespace
}  // namespace cuda
}  // namespace blossom
