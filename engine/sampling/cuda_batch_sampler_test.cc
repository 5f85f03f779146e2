// CudaBatchSampler against its CPU twin, HostBatchSampler, on the same logits:
//  - greedy rows (with and without penalties, with each step-1 edit: allowed ids, bans, bad
//    words, bias, guided choice, a constraint): the same token, exactly, and the same logprobs to
//    1e-5 (the device sums in another order) with the same top ids;
//  - sampled rows (temperature, top_k, top_p, typical_p, min_p, with and without edits): the
//    GPU draws from its own Philox stream, so the check is that the token has nonzero
//    probability under the CPU's distribution for that row (SamplingDistribution) and that the
//    same seed and offset give the same token again;
//  - rows that fail (nothing left, a NaN, a bad id) fail alone with the host's codes;
//  - rows on non-consecutive logit rows, in several runs.
// Without a visible GPU every test reports SKIPPED with the reason; those that compare with the
// host sampler first run their host half, with the host's results standing in for the GPU's, so
// that a wrong premise (a request that cannot sample what the test expects) fails here rather
// than on a scarce GPU machine.
#include "engine/sampling/cuda_batch_sampler.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device.h"

namespace blossom {
namespace {

constexpr int64_t kVocab = 4096;

// One request's parameters and history.
struct Request {
  SamplingParams params;
  std::vector<int32_t> prompt{3, 17, 17, 250};
  std::vector<int32_t> output{9, 9, 1000};
  std::vector<int32_t> suppressed;
};

// A structured-output constraint for the tests: only these tokens, whatever the output.
class OnlyTokens : public TokenConstraint {
 public:
  explicit OnlyTokens(std::vector<int32_t> tokens) : tokens_(std::move(tokens)) {}
  absl::StatusOr<std::shared_ptr<const TokenBitmask>> AllowedTokens(
      absl::Span<const int32_t>, int32_t) const override {
    auto mask = std::make_shared<TokenBitmask>(64, 0);
    for (int32_t t : tokens_) (*mask)[t / 64] |= uint64_t{1} << (t % 64);
    return mask;
  }

 private:
  std::vector<int32_t> tokens_;
};

class CudaBatchSamplerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const cuda::DeviceQuery q = cuda::QueryDevices();
    if (q.count == 0) {
      no_gpu_reason_ = q.reason;  // host-half mode: SampleOnBoth only samples on the host
      return;
    }
    absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create();
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
    absl::StatusOr<std::unique_ptr<CudaBatchSampler>> sampler =
        CudaBatchSampler::Create(backend_.get());
    ASSERT_TRUE(sampler.ok()) << sampler.status();
    sampler_ = std::move(*sampler);
  }

  static std::vector<float> RandomLogits(int64_t rows, uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 4.0f);
    std::vector<float> logits(static_cast<size_t>(rows * kVocab));
    for (float& x : logits) x = normal(gen);
    return logits;
  }

  // The logits on the device (a fresh copy: the GPU sampler overwrites rows with penalties).
  Tensor Upload(const std::vector<float>& host) {
    const int64_t rows = static_cast<int64_t>(host.size()) / kVocab;
    absl::StatusOr<OwnedTensor> owned = backend_->AllocateTensor(DType::kF32, {rows, kVocab});
    EXPECT_TRUE(owned.ok()) << owned.status();
    device_ = std::move(*owned);
    EXPECT_TRUE(backend_->CopyToDevice(host.data(), device_.tensor).ok());
    return device_.tensor;
  }

  // The same rows sampled by the GPU sampler (on a device copy of `host`) and by the host
  // sampler (on `host`), each with fresh generators seeded from the requests.
  void SampleOnBoth(const std::vector<float>& host, std::vector<Request>& requests,
                    const std::vector<int64_t>& logit_rows,
                    std::vector<absl::StatusOr<SampleResult>>* gpu,
                    std::vector<absl::StatusOr<SampleResult>>* cpu, int32_t end_token = -1);

  // The rows the GPU sampler drew (nothing to check without one).
  void ExpectRowsSampled(int64_t rows) {
    if (sampler_ != nullptr) {
      EXPECT_EQ(sampler_->rows_sampled(), rows);
    }
  }

  std::unique_ptr<CudaBackend> backend_;
  std::unique_ptr<CudaBatchSampler> sampler_;  // null without a GPU
  std::string no_gpu_reason_;
  OwnedTensor device_;
};

// A test that needs the GPU throughout.
#define SKIP_WITHOUT_GPU() \
  if (sampler_ == nullptr) GTEST_SKIP() << "no GPU: " << no_gpu_reason_
// The end of a test whose host half ran: without a GPU it is reported SKIPPED (unless the host
// half failed, which is a failure).
#define END_HOST_HALF()                                                       \
  if (sampler_ == nullptr)                                                    \
  GTEST_SKIP() << "no GPU: " << no_gpu_reason_                                \
               << " (only the host half ran, checking the test's premises)"

std::vector<SampleRow> RowsFor(std::vector<Request>& requests, std::vector<RequestRng>& rngs,
                               const std::vector<int64_t>& logit_rows, int32_t end_token = -1) {
  std::vector<SampleRow> rows;
  for (size_t i = 0; i < requests.size(); ++i) {
    SampleRow row;
    row.logit_row = logit_rows[i];
    row.params = &requests[i].params;
    row.context.prompt_tokens = requests[i].prompt;
    row.context.output_tokens = requests[i].output;
    row.context.suppressed_tokens = requests[i].suppressed;
    row.context.end_token = end_token;
    row.rng = &rngs[i];
    rows.push_back(row);
  }
  return rows;
}

void CudaBatchSamplerTest::SampleOnBoth(const std::vector<float>& host,
                                        std::vector<Request>& requests,
                                        const std::vector<int64_t>& logit_rows,
                                        std::vector<absl::StatusOr<SampleResult>>* gpu,
                                        std::vector<absl::StatusOr<SampleResult>>* cpu,
                                        int32_t end_token) {
  std::vector<RequestRng> gpu_rngs, cpu_rngs;
  for (const Request& r : requests) {
    gpu_rngs.emplace_back(r.params.seed.value_or(1));
    cpu_rngs.emplace_back(r.params.seed.value_or(1));
  }
  std::vector<SampleRow> gpu_rows = RowsFor(requests, gpu_rngs, logit_rows, end_token);
  std::vector<SampleRow> cpu_rows = RowsFor(requests, cpu_rngs, logit_rows, end_token);
  if (sampler_ != nullptr) {
    ASSERT_TRUE(sampler_->SampleBatch(Upload(host), gpu_rows, gpu).ok());
  }
  std::vector<float> host_copy = host;
  const int64_t rows = static_cast<int64_t>(host.size()) / kVocab;
  HostBatchSampler reference;
  ASSERT_TRUE(
      reference.SampleBatch(Tensor(host_copy.data(), DType::kF32, {rows, kVocab}), cpu_rows, cpu)
          .ok());
  if (sampler_ == nullptr) *gpu = *cpu;  // the host's results stand in
  ASSERT_EQ(gpu->size(), requests.size());
  ASSERT_EQ(cpu->size(), requests.size());
}

TEST_F(CudaBatchSamplerTest, GreedyRowsMatchTheHostSampler) {
  std::vector<Request> requests(4);
  for (Request& r : requests) r.params.temperature = 0.0f;
  requests[1].params.repetition_penalty = 1.5f;
  requests[2].params.frequency_penalty = 1.0f;
  requests[2].params.presence_penalty = 0.5f;
  requests[3].params.top_k = 5;
  std::vector<absl::StatusOr<SampleResult>> gpu, cpu;
  SampleOnBoth(RandomLogits(4, 11), requests, {0, 1, 2, 3}, &gpu, &cpu);
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(gpu[i].ok()) << gpu[i].status();
    ASSERT_TRUE(cpu[i].ok()) << cpu[i].status();
    EXPECT_EQ(gpu[i]->token, cpu[i]->token) << "row " << i;
  }
  ExpectRowsSampled(4);
  END_HOST_HALF();
}

// One request whose row has nothing to draw fails alone, with the host sampler's error; a tiny
// temperature samples the maximum, as on the host. Neither disturbs the rows beside it.
TEST_F(CudaBatchSamplerTest, OneBadRowFailsOnlyItsRequest) {
  std::vector<Request> requests(3);
  for (Request& r : requests) r.params.temperature = 0.0f;
  requests[1].params.temperature = 1e-40f;  // denormal: 1 / t overflows
  std::vector<float> host = RandomLogits(4, 5);
  for (int64_t i = 0; i < kVocab; ++i) host[static_cast<size_t>(2 * kVocab + i)] = -INFINITY;
  std::vector<absl::StatusOr<SampleResult>> gpu, cpu;
  SampleOnBoth(host, requests, {0, 1, 2}, &gpu, &cpu);
  ASSERT_TRUE(gpu[0].ok()) << gpu[0].status();
  ASSERT_TRUE(gpu[1].ok()) << gpu[1].status();
  EXPECT_EQ(gpu[0]->token, cpu[0]->token);
  EXPECT_EQ(gpu[1]->token, cpu[1]->token);
  EXPECT_EQ(gpu[2].status().code(), absl::StatusCode::kFailedPrecondition) << gpu[2].status();
  EXPECT_EQ(cpu[2].status().code(), absl::StatusCode::kFailedPrecondition) << cpu[2].status();
  END_HOST_HALF();
}

// Step 1 on the device (masks, bans, bias, uploaded as LogitEdits): greedy rows with each
// feature give the host sampler's token, and its logprobs (the raw row's) to 1e-5.
TEST_F(CudaBatchSamplerTest, EditedRowsMatchTheHostSampler) {
  std::vector<Request> requests(8);
  requests[0].suppressed = {0, 1, 2};
  requests[0].params.logprobs = 5;
  requests[1].suppressed = {5};
  requests[2].params.allowed_token_ids = {3, 99, 4000};
  requests[3].params.bad_words_token_ids = {{7}, {1000, 2}};  // output ends with 1000: 2 banned
  requests[4].params.logit_bias = {{12, 30.0f}, {13, -100.0f}};
  requests[4].params.logprobs = 2;  // the drawn 12 is biased: its logprob is the raw one
  // The output so far (9, 9, 1000) is where both choices stand.
  requests[5].params.choice_token_ids = {{9, 9, 1000, 21, 22}, {9, 9, 1000, 23}};
  requests[6].params.constraint = std::make_shared<OnlyTokens>(std::vector<int32_t>{30, 31});
  requests[7].params.allowed_token_ids = {40, 41};
  requests[7].params.choice_token_ids = {{9, 9, 1000}};  // the output is the whole choice
  requests[7].params.repetition_penalty = 1.4f;
  for (Request& r : requests) r.params.temperature = 0.0f;
  std::vector<float> host = RandomLogits(8, 12);
  host[static_cast<size_t>(4 * kVocab + 2)] = 40.0f;  // request 3's (logit row 4) best, banned
  std::vector<absl::StatusOr<SampleResult>> gpu, cpu;
  SampleOnBoth(host, requests, {7, 6, 5, 4, 3, 2, 1, 0}, &gpu, &cpu, /*end_token=*/77);
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "row " << i);
    ASSERT_TRUE(gpu[i].ok()) << gpu[i].status();
    ASSERT_TRUE(cpu[i].ok()) << cpu[i].status();
    EXPECT_EQ(gpu[i]->token, cpu[i]->token);
    EXPECT_NEAR(gpu[i]->logprob, cpu[i]->logprob, 1e-5);
    ASSERT_EQ(gpu[i]->top.size(), cpu[i]->top.size());
    for (size_t t = 0; t < cpu[i]->top.size(); ++t) {
      EXPECT_EQ(gpu[i]->top[t].token, cpu[i]->top[t].token);
      EXPECT_NEAR(gpu[i]->top[t].logprob, cpu[i]->top[t].logprob, 1e-5);
    }
  }
  ExpectRowsSampled(8);
  // The edits took effect (the host's tokens are the same, so this checks the test's premises).
  EXPECT_GT(gpu[0]->token, 2);
  EXPECT_TRUE(gpu[2]->token == 3 || gpu[2]->token == 99 || gpu[2]->token == 4000) << gpu[2]->token;
  EXPECT_NE(gpu[3]->token, 2);
  EXPECT_EQ(gpu[4]->token, 12) << "+30 on logits of standard deviation 4";
  EXPECT_TRUE(gpu[5]->token == 21 || gpu[5]->token == 23) << gpu[5]->token;
  EXPECT_TRUE(gpu[6]->token == 30 || gpu[6]->token == 31) << gpu[6]->token;
  EXPECT_EQ(gpu[7]->token, 77) << "a whole choice allows only the end token";
  END_HOST_HALF();
}

// A row whose edits leave nothing, a row holding a NaN (without logprobs) and a row naming an id
// outside the vocabulary each fail alone, with the host's codes.
TEST_F(CudaBatchSamplerTest, RowsFailAloneWithTheHostsCodes) {
  std::vector<Request> requests(4);
  for (Request& r : requests) r.params.temperature = 0.0f;
  requests[0].params.allowed_token_ids = {5};
  requests[0].suppressed = {5};
  requests[2].suppressed = {static_cast<int32_t>(kVocab)};
  std::vector<float> host = RandomLogits(4, 16);
  host[static_cast<size_t>(1 * kVocab + 100)] = NAN;
  std::vector<absl::StatusOr<SampleResult>> gpu, cpu;
  SampleOnBoth(host, requests, {0, 1, 2, 3}, &gpu, &cpu);
  const absl::StatusCode want[] = {absl::StatusCode::kFailedPrecondition,
                                   absl::StatusCode::kInternal,
                                   absl::StatusCode::kInvalidArgument, absl::StatusCode::kOk};
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(gpu[i].status().code(), want[i]) << "row " << i << ": " << gpu[i].status();
    EXPECT_EQ(cpu[i].status().code(), want[i]) << "row " << i << ": " << cpu[i].status();
  }
  ASSERT_TRUE(gpu[3].ok() && cpu[3].ok());
  EXPECT_EQ(gpu[3]->token, cpu[3]->token);
  END_HOST_HALF();
}

// Logprob rows stay on the device and report the host sampler's logprobs (RawLogprobs of the
// row for the token drawn; greedy rows draw the host's token too). Tolerance 1e-5: the device
// sums the same fp32 weights in double in another order. A NaN or +inf row fails with Internal.
TEST_F(CudaBatchSamplerTest, LogprobRowsAreScoredOnTheDevice) {
  std::vector<Request> requests(6);
  requests[0].params.temperature = 0.0f;
  requests[0].params.logprobs = 0;
  requests[1].params.temperature = 0.0f;
  requests[1].params.logprobs = kMaxLogprobs;
  requests[1].params.repetition_penalty = 1.3f;
  requests[2].params.temperature = 0.9f;
  requests[2].params.top_k = 30;
  requests[2].params.logprobs = 3;
  requests[3].params.temperature = 1.0f;
  requests[3].params.frequency_penalty = 0.7f;
  requests[3].params.presence_penalty = 0.2f;
  requests[3].params.logprobs = 1;
  requests[4].params.temperature = 0.0f;
  requests[4].params.logprobs = 2;  // its row holds a NaN
  requests[5].params.temperature = 0.0f;  // no logprobs: none reported
  for (size_t i = 0; i < requests.size(); ++i) requests[i].params.seed = 60 + i;
  std::vector<float> host = RandomLogits(6, 15);
  host[static_cast<size_t>(4 * kVocab + 33)] = NAN;
  std::vector<absl::StatusOr<SampleResult>> gpu, cpu;
  SampleOnBoth(host, requests, {0, 1, 2, 3, 4, 5}, &gpu, &cpu);
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "row " << i);
    if (i == 4) {
      EXPECT_EQ(gpu[i].status().code(), absl::StatusCode::kInternal) << gpu[i].status();
      EXPECT_EQ(cpu[i].status().code(), absl::StatusCode::kInternal) << cpu[i].status();
      continue;
    }
    ASSERT_TRUE(gpu[i].ok()) << gpu[i].status();
    ASSERT_TRUE(cpu[i].ok()) << cpu[i].status();
    if (requests[i].params.temperature == 0.0f) {
      EXPECT_EQ(gpu[i]->token, cpu[i]->token);
    }
    const absl::StatusOr<SampleResult> want =
        RawLogprobs(absl::MakeConstSpan(host.data() + i * kVocab, kVocab), gpu[i]->token,
                    std::max(requests[i].params.logprobs, 0));
    ASSERT_TRUE(want.ok()) << want.status();
    if (requests[i].params.logprobs < 0) {
      EXPECT_TRUE(gpu[i]->top.empty());
      continue;
    }
    EXPECT_NEAR(gpu[i]->logprob, want->logprob, 1e-5);
    ASSERT_EQ(gpu[i]->top.size(), want->top.size());
    for (size_t t = 0; t < want->top.size(); ++t) {
      EXPECT_EQ(gpu[i]->top[t].token, want->top[t].token) << "rank " << t;
      EXPECT_NEAR(gpu[i]->top[t].logprob, want->top[t].logprob, 1e-5) << "rank " << t;
    }
  }
  ExpectRowsSampled(6);
  END_HOST_HALF();
}

TEST_F(CudaBatchSamplerTest, SampledRowsDrawFromTheHostDistributionReproducibly) {
  SKIP_WITHOUT_GPU();
  std::vector<Request> requests(7);
  requests[0].params.temperature = 0.7f;
  requests[1].params.temperature = 1.0f;
  requests[1].params.top_k = 20;
  requests[2].params.temperature = 1.3f;
  requests[2].params.top_p = 0.8f;
  requests[2].params.repetition_penalty = 1.2f;
  requests[3].params.temperature = 1.1f;
  requests[3].params.typical_p = 0.7f;
  requests[4].params.temperature = 0.9f;
  requests[4].params.top_p = 0.95f;
  requests[4].params.typical_p = 0.9f;
  requests[4].params.min_p = 0.1f;
  // Rows with edits: a mask and a bias (with top_p), bans (with typical_p).
  requests[5].params.temperature = 1.0f;
  requests[5].params.allowed_token_ids = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89};
  requests[5].params.logit_bias = {{2, 5.0f}, {3, -2.0f}};
  requests[5].params.top_p = 0.9f;
  requests[6].params.temperature = 0.8f;
  requests[6].suppressed = {0, 1, 2, 3, 4};
  requests[6].params.typical_p = 0.6f;
  // Logit rows 0, 1, 4, 5, 6, 2 and 3: runs {0, 1}, {2, 3} and {4, 5, 6}.
  const std::vector<float> host = RandomLogits(7, 13);
  const std::vector<int64_t> logit_rows = {0, 1, 4, 5, 6, 2, 3};
  std::vector<int32_t> first_tokens;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<RequestRng> rngs;
    for (size_t i = 0; i < requests.size(); ++i) rngs.emplace_back(uint64_t{77} + i);
    std::vector<SampleRow> rows = RowsFor(requests, rngs, logit_rows);
    std::vector<absl::StatusOr<SampleResult>> gpu;
    ASSERT_TRUE(sampler_->SampleBatch(Upload(host), rows, &gpu).ok());
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_TRUE(gpu[i].ok()) << gpu[i].status();
      SamplerScratch scratch;
      absl::StatusOr<std::vector<TokenProbability>> support = SamplingDistribution(
          absl::MakeConstSpan(host.data() + rows[i].logit_row * kVocab, kVocab),
          requests[i].params, rows[i].context, scratch);
      ASSERT_TRUE(support.ok()) << support.status();
      bool found = false;
      for (const TokenProbability& tp : *support) found |= tp.token == gpu[i]->token;
      EXPECT_TRUE(found) << "row " << i << ": token " << gpu[i]->token
                         << " has probability 0 on the CPU";
      if (attempt == 0) {
        first_tokens.push_back(gpu[i]->token);
      } else {
        EXPECT_EQ(gpu[i]->token, first_tokens[i]) << "row " << i << ": same seed and offset";
      }
    }
  }
  ExpectRowsSampled(14);
}

// Prompt logprobs on the device: RawLogprobs' token logprob (1e-5), rank and top ids (exact),
// and its errors per row.
TEST_F(CudaBatchSamplerTest, ScoreRowsMatchRawLogprobs) {
  SKIP_WITHOUT_GPU();
  std::vector<float> host = RandomLogits(3, 17);
  host[static_cast<size_t>(2 * kVocab + 9)] = NAN;
  const std::vector<ScoreRow> rows = {{1, 33, 4}, {0, 4095, 0}, {2, 3, 2}, {0, 12, kMaxLogprobs},
                                      {1, static_cast<int32_t>(kVocab), 1}};
  std::vector<absl::StatusOr<SampleResult>> gpu, cpu;
  ASSERT_TRUE(sampler_->ScoreRows(Upload(host), rows, &gpu).ok());
  HostBatchSampler reference;
  ASSERT_TRUE(
      reference.ScoreRows(Tensor(host.data(), DType::kF32, {3, kVocab}), rows, &cpu).ok());
  ASSERT_EQ(gpu.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "row " << i);
    ASSERT_EQ(gpu[i].status().code(), cpu[i].status().code()) << gpu[i].status() << " vs "
                                                                << cpu[i].status();
    if (!cpu[i].ok()) continue;
    EXPECT_EQ(gpu[i]->token, cpu[i]->token);
    EXPECT_EQ(gpu[i]->rank, cpu[i]->rank);
    EXPECT_NEAR(gpu[i]->logprob, cpu[i]->logprob, 1e-5);
    ASSERT_EQ(gpu[i]->top.size(), cpu[i]->top.size());
    for (size_t t = 0; t < cpu[i]->top.size(); ++t) {
      EXPECT_EQ(gpu[i]->top[t].token, cpu[i]->top[t].token);
      EXPECT_NEAR(gpu[i]->top[t].logprob, cpu[i]->top[t].logprob, 1e-5);
    }
  }
  EXPECT_EQ(gpu[2].status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(gpu[4].status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaBatchSamplerTest, RefusesHostLogitsAndSharedRows) {
  SKIP_WITHOUT_GPU();
  std::vector<float> host = RandomLogits(2, 14);
  std::vector<Request> requests(2);
  std::vector<RequestRng> rngs(2, RequestRng(1));
  std::vector<absl::StatusOr<SampleResult>> results;
  std::vector<SampleRow> rows = RowsFor(requests, rngs, {0, 1});
  EXPECT_EQ(sampler_->SampleBatch(Tensor(host.data(), DType::kF32, {2, kVocab}), rows, &results)
                .code(),
            absl::StatusCode::kInvalidArgument);
  rows = RowsFor(requests, rngs, {1, 1});
  EXPECT_EQ(sampler_->SampleBatch(Upload(host), rows, &results).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace blossom
