// CudaSampler's device logprobs against an independent host reference in double precision:
// log-softmax of the raw row (before edits and penalties), the top n by value descending with
// ties to the lowest id, -inf left out. Tolerance: 1e-5 absolute on every logprob (the device
// takes fp32 expf per logit and sums in double in another order: ~1e-7 relative on the sum), ids
// exact; a NaN anywhere fails the comparison (EXPECT_NEAR is false for NaN).
// Without a visible GPU every test reports SKIPPED with the reason (CudaSamplerFixture).
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_sampler_fixture.h"
#include "kernels/cuda/cuda_sampling.h"

namespace blossom {
namespace cuda {
namespace {

constexpr double kTolerance = 1e-5;

class CudaSamplingLogprobsTest : public CudaSamplerFixture {
 protected:
  // Uploads `host` ([rows, vocab]) and samples it; the tokens and logprobs come back.
  void Sample(const std::vector<float>& host, int64_t vocab, const std::vector<SamplingRow>& rows,
              std::vector<int32_t>* tokens, std::vector<SampledLogprobs>* logprobs) {
    ASSERT_TRUE(Upload(host));
    tokens->assign(rows.size(), -7);
    const absl::Status s = sampler_->Sample(logits_, vocab, rows, tokens->data(), logprobs);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(logprobs->size(), rows.size());
  }
};

// The reference: raw log-softmax of one row, in double.
struct Reference {
  explicit Reference(const float* row, int64_t vocab) : row(row, row + vocab) {
    double mx = -INFINITY;
    for (float v : this->row) mx = std::max(mx, static_cast<double>(v));
    double sum = 0.0;
    for (float v : this->row) {
      if (v != -INFINITY) sum += std::exp(static_cast<double>(v) - mx);
    }
    max_logit = mx;
    log_sum = std::log(sum);
  }
  double Logprob(int32_t id) const {
    const double value = static_cast<double>(row[id]) - max_logit - log_sum;
    return std::max(value, -static_cast<double>(FLT_MAX));
  }
  std::vector<int32_t> Top(int32_t n) const {
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < static_cast<int32_t>(row.size()); ++i) {
      if (row[i] != -INFINITY) ids.push_back(i);
    }
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    ids.resize(std::min<size_t>(ids.size(), static_cast<size_t>(n)));
    return ids;
  }
  std::vector<float> row;
  double max_logit, log_sum;
};

void ExpectMatches(const Reference& ref, int32_t token, int32_t n, const SampledLogprobs& got,
                   const char* what) {
  SCOPED_TRACE(what);
  EXPECT_FALSE(got.nonfinite);
  EXPECT_NEAR(got.chosen, ref.Logprob(token), kTolerance) << "chosen token " << token;
  const std::vector<int32_t> want = ref.Top(n);
  ASSERT_EQ(got.top_ids, want);
  ASSERT_EQ(got.top_logprobs.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_NEAR(got.top_logprobs[k], ref.Logprob(want[k]), kTolerance) << "rank " << k;
  }
}

// Greedy and sampled rows over BLOOM's vocabulary, n from 0 to the cap, beside a row that asks
// for none: each logprob row matches the reference, whatever the batch around it.
TEST_F(CudaSamplingLogprobsTest, MatchTheReferenceOverTheFullVocabulary) {
  const int32_t ns[] = {0, 1, 5, kMaxTopLogprobs, -1};
  std::vector<float> l = RandomLogits(5 * kBloomVocab, 21, 4.0f);
  std::vector<SamplingRow> rows(5);
  for (int r = 0; r < 5; ++r) {
    rows[r].logprobs = ns[r];
    rows[r].temperature = r % 2 == 0 ? 0.0f : 0.8f;
    rows[r].top_k = r == 3 ? 50 : 0;
    rows[r].seed = 5 + r;
  }
  std::vector<int32_t> tokens;
  std::vector<SampledLogprobs> got;
  ASSERT_NO_FATAL_FAILURE(Sample(l, kBloomVocab, rows, &tokens, &got));
  for (int r = 0; r < 4; ++r) {
    ASSERT_GE(tokens[r], 0);
    const Reference ref(l.data() + r * kBloomVocab, kBloomVocab);
    ExpectMatches(ref, tokens[r], ns[r], got[r], "row");
    if (rows[r].temperature == 0.0f) {
      EXPECT_EQ(tokens[r], ref.Top(1)[0]) << "greedy row " << r;
      EXPECT_NEAR(got[r].chosen, ref.Logprob(ref.Top(1)[0]), kTolerance);
    }
  }
  EXPECT_TRUE(got[4].top_ids.empty()) << "a row without logprobs gets none";
  EXPECT_EQ(got[4].chosen, 0.0f);
}

// Ties across threads resolve to the lowest ids; -inf logits are never listed; a row with fewer
// finite logits than n lists only those.
TEST_F(CudaSamplingLogprobsTest, TiesGoToTheLowestIdsAndMaskedIdsAreLeftOut) {
  std::vector<float> l = RandomLogits(2 * kBloomVocab, 22, 1.0f);
  // Row 0: 30 equal maxima spread over the vocabulary (so over many threads), ids descending.
  for (int k = 0; k < 30; ++k) l[static_cast<size_t>(kBloomVocab - 1 - k * 8191)] = 20.0f;
  // Row 1: all but 7 ids masked.
  for (int64_t i = 0; i < kBloomVocab; ++i) l[static_cast<size_t>(kBloomVocab + i)] = -INFINITY;
  const int32_t finite[] = {5, 600, 70000, 70001, 123456, 200000, 250879};
  for (int k = 0; k < 7; ++k) l[static_cast<size_t>(kBloomVocab + finite[k])] = 0.25f * (k % 3);
  std::vector<SamplingRow> rows(2);
  for (SamplingRow& row : rows) {
    row.temperature = 0.0f;
    row.logprobs = kMaxTopLogprobs;
  }
  std::vector<int32_t> tokens;
  std::vector<SampledLogprobs> got;
  ASSERT_NO_FATAL_FAILURE(Sample(l, kBloomVocab, rows, &tokens, &got));
  const Reference tied(l.data(), kBloomVocab), masked(l.data() + kBloomVocab, kBloomVocab);
  ExpectMatches(tied, tokens[0], kMaxTopLogprobs, got[0], "ties");
  EXPECT_EQ(tokens[0], kBloomVocab - 1 - 29 * 8191) << "greedy: the lowest id of the maxima";
  ExpectMatches(masked, tokens[1], kMaxTopLogprobs, got[1], "masked");
  EXPECT_EQ(got[1].top_ids.size(), 7u);
}

// Penalties change the draw but not the logprobs, which score the raw row: a greedy row whose
// raw argmax the repetition penalty demotes reports the raw logprob of the token it did draw,
// even though that token's logit was overwritten too (it is in the history).
TEST_F(CudaSamplingLogprobsTest, PenalisedRowsReportRawLogprobs) {
  const int64_t V = 4096;
  std::vector<float> l = RandomLogits(2 * V, 23, 0.3f);  // the rest stay below ~1.3
  l[100] = 9.0f;     // row 0: raw argmax, in the prompt: 9 / 4 = 2.25 after the penalty
  l[200] = 6.0f;     // row 0: in the output: 6 / 4 = 1.5
  l[300] = 3.0f;     // row 0: not in the history, so the draw (3 > 2.25)
  l[V + 10] = 5.0f;  // row 1: three times in the output: 5 - 3 * 1.0 - 0.5 = 1.5
  l[V + 11] = 4.0f;  // row 1: once in the output: 4 - 1 - 0.5 = 2.5, the draw
  std::vector<SamplingRow> rows(2);
  rows[0].temperature = 0.0f;
  rows[0].repetition_penalty = 4.0f;
  rows[0].prompt_tokens = {100, 7, 100};
  rows[0].output_tokens = {200};
  rows[0].logprobs = 3;
  rows[1].temperature = 0.0f;
  rows[1].frequency_penalty = 1.0f;
  rows[1].presence_penalty = 0.5f;
  rows[1].output_tokens = {10, 11, 10, 10};
  rows[1].logprobs = 2;
  std::vector<int32_t> tokens;
  std::vector<SampledLogprobs> got;
  ASSERT_NO_FATAL_FAILURE(Sample(l, V, rows, &tokens, &got));
  const Reference r0(l.data(), V), r1(l.data() + V, V);
  EXPECT_EQ(tokens[0], 300);
  ExpectMatches(r0, tokens[0], 3, got[0], "repetition");
  EXPECT_EQ(got[0].top_ids, (std::vector<int32_t>{100, 200, 300}));
  EXPECT_EQ(tokens[1], 11);
  ExpectMatches(r1, tokens[1], 2, got[1], "frequency");

  // A drawn token that is in the penalised history: its logprob is the raw 9's (the stashed
  // value), not that of the 9 / 1.01 the penalty wrote over it.
  rows[0].repetition_penalty = 1.01f;
  rows[0].prompt_tokens = {100};
  rows[0].output_tokens = {};
  ASSERT_NO_FATAL_FAILURE(Sample(l, V, {rows[0]}, &tokens, &got));
  EXPECT_EQ(tokens[0], 100);
  ExpectMatches(r0, 100, 3, got[0], "drawn token in the history");
}

// A drawn token that a bias lifted reports its raw logprob (the kernel keeps the raw logit before
// the edit kernel adds the bias); masked tokens still count in the raw log-softmax.
TEST_F(CudaSamplingLogprobsTest, EditedRowsReportRawLogprobs) {
  const int64_t V = 512;
  std::vector<float> l = RandomLogits(V, 25, 1.0f);
  std::vector<uint64_t> allowed(V / 64, ~uint64_t{0});
  allowed[0] = 0;  // ids 0-63 masked
  SamplingRow row;
  row.temperature = 0.0f;
  row.logprobs = 4;
  row.allowed = allowed;
  row.bias = {{300, 50.0f}};
  row.banned = {301};
  std::vector<int32_t> tokens;
  std::vector<SampledLogprobs> got;
  ASSERT_NO_FATAL_FAILURE(Sample(l, V, {row}, &tokens, &got));
  EXPECT_EQ(tokens[0], 300);
  ExpectMatches(Reference(l.data(), V), 300, 4, got[0], "biased draw");
}

// A NaN or +inf in a logprob row is flagged (the row's own failure); its neighbours are scored.
TEST_F(CudaSamplingLogprobsTest, NonFiniteRowsAreFlagged) {
  const int64_t V = 3000;
  std::vector<float> l = RandomLogits(3 * V, 24, 1.0f);
  l[17] = NAN;
  l[2 * V + 2999] = INFINITY;
  std::vector<SamplingRow> rows(3);
  for (SamplingRow& row : rows) {
    row.temperature = 0.0f;
    row.logprobs = 1;
  }
  std::vector<int32_t> tokens;
  std::vector<SampledLogprobs> got;
  ASSERT_NO_FATAL_FAILURE(Sample(l, V, rows, &tokens, &got));
  EXPECT_TRUE(got[0].nonfinite);
  EXPECT_TRUE(got[2].nonfinite);
  ExpectMatches(Reference(l.data() + V, V), tokens[1], 1, got[1], "finite neighbour");
}

// Prompt logprobs: known tokens scored on rows in any order, with their ranks (the entries whose
// logit is >= the token's, ties counted), the same reference otherwise; the logits are not edited.
TEST_F(CudaSamplingLogprobsTest, ScoresKnownTokensWithTheirRanks) {
  std::vector<float> l = RandomLogits(3 * kBloomVocab, 26, 3.0f);
  for (int k = 0; k < 5; ++k) l[static_cast<size_t>(kBloomVocab + 1000 * k)] = 2.5f;  // ties
  l[static_cast<size_t>(2 * kBloomVocab + 17)] = -INFINITY;
  const size_t bytes = l.size() * sizeof(float);
  ASSERT_EQ(cudaMalloc(&logits_, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(logits_, l.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  const std::vector<ScoreRequest> requests = {
      {2, 5, 3}, {0, 123456, 0}, {1, 2000, kMaxTopLogprobs}, {2, 17, 1}, {0, 7, 1}};
  std::vector<ScoredRow> got;
  ASSERT_TRUE(sampler_->Score(logits_, kBloomVocab, requests, &got).ok());
  ASSERT_EQ(got.size(), requests.size());
  for (size_t e = 0; e < requests.size(); ++e) {
    SCOPED_TRACE(testing::Message() << "request " << e);
    const ScoreRequest& q = requests[e];
    const float* row = l.data() + q.row * kBloomVocab;
    const Reference ref(row, kBloomVocab);
    EXPECT_FALSE(got[e].nonfinite);
    EXPECT_NEAR(got[e].logprob, ref.Logprob(q.token), kTolerance);
    const int32_t rank = static_cast<int32_t>(
        std::count_if(row, row + kBloomVocab, [&](float v) { return v >= row[q.token]; }));
    EXPECT_EQ(got[e].rank, rank);
    const std::vector<int32_t> want = ref.Top(q.top_n);
    EXPECT_EQ(got[e].top_ids, want);
    for (size_t k = 0; k < want.size() && k < got[e].top_logprobs.size(); ++k) {
      EXPECT_NEAR(got[e].top_logprobs[k], ref.Logprob(want[k]), kTolerance);
    }
  }
  EXPECT_EQ(got[3].logprob, -FLT_MAX) << "a -inf logit's logprob is clamped";
  std::vector<float> back(l.size());
  ASSERT_EQ(cudaMemcpy(back.data(), logits_, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, l) << "scoring leaves the logits alone";
}

TEST_F(CudaSamplingLogprobsTest, RefusesOutOfRangeCountsAndAMissingOutput) {
  std::vector<float> l(100, 0.0f);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, l.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, l.data(), l.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  SamplingRow row;
  row.logprobs = kMaxTopLogprobs + 1;
  int32_t token = 0;
  std::vector<SampledLogprobs> got;
  EXPECT_EQ(sampler_->Sample(d, 100, {row}, &token, &got).code(),
            absl::StatusCode::kInvalidArgument);
  row.logprobs = 2;
  EXPECT_EQ(sampler_->Sample(d, 100, {row}, &token, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  cudaFree(d);
}

}  // namespace
}  // namespace cuda
}  // namespace blossom
