// CudaBatchSampler::DeviceRow, the host side of a GPU sampling row: runs without a GPU (so it is
// not in the GPU suite). A row carries the token histories only when a penalty will read them,
// since the GPU sampler copies, checks and uploads every token a row carries.
#include <cstdint>
#include <vector>

#include "engine/sampling/cuda_batch_sampler.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(CudaBatchSamplerRowsTest, CarriesTheHistoriesOnlyThePenaltiesRead) {
  const std::vector<int32_t> prompt = {3, 17, 17, 250}, output = {9, 9, 1000};
  RequestRng rng(uint64_t{77});
  auto device_row = [&](const SamplingParams& params) {
    SampleRow row;
    row.params = &params;
    row.context.prompt_tokens = prompt;
    row.context.output_tokens = output;
    row.rng = &rng;
    return CudaBatchSampler::DeviceRow(row);
  };
  SamplingParams plain;
  plain.temperature = 0.7f;
  plain.top_k = 40;
  const cuda::SamplingRow none = device_row(plain);
  EXPECT_TRUE(none.prompt_tokens.empty());
  EXPECT_TRUE(none.output_tokens.empty());
  EXPECT_EQ(none.temperature, 0.7f);
  EXPECT_EQ(none.top_k, 40);
  EXPECT_EQ(none.seed, 77u);
  EXPECT_EQ(none.offset, output.size()) << "the draw index stays the output length";
  EXPECT_EQ(none.logprobs, -1);

  SamplingParams scored;
  scored.logprobs = 7;
  scored.typical_p = 0.6f;
  scored.min_p = 0.05f;
  const cuda::SamplingRow filtered = device_row(scored);
  EXPECT_EQ(filtered.logprobs, 7);
  EXPECT_EQ(filtered.typical_p, 0.6f);
  EXPECT_EQ(filtered.min_p, 0.05f);

  SamplingParams repetition;
  repetition.repetition_penalty = 1.2f;
  const cuda::SamplingRow rep = device_row(repetition);
  EXPECT_EQ(rep.prompt_tokens, prompt);
  EXPECT_EQ(rep.output_tokens, output);

  for (auto set : {+[](SamplingParams& p) { p.frequency_penalty = 0.5f; },
                   +[](SamplingParams& p) { p.presence_penalty = -0.25f; }}) {
    SamplingParams additive;
    set(additive);
    const cuda::SamplingRow add = device_row(additive);
    EXPECT_TRUE(add.prompt_tokens.empty()) << "the additive penalties read only the output";
    EXPECT_EQ(add.output_tokens, output);
  }
}

// Logprob, typical-p and min-p rows stay on the device; masks still need the host.
TEST(CudaBatchSamplerRowsTest, LogprobAndFilterRowsStayOnTheDevice) {
  SamplingParams params;
  SampleRow row;
  row.params = &params;
  for (int32_t n : {0, 1, kMaxLogprobs}) {
    params.logprobs = n;
    EXPECT_FALSE(CudaBatchSampler::NeedsHost(row)) << "logprobs " << n;
  }
  params.typical_p = 0.5f;
  params.min_p = 0.1f;
  EXPECT_FALSE(CudaBatchSampler::NeedsHost(row)) << "typical_p and min_p are on the device too";
  const std::vector<int32_t> suppressed = {4};
  row.context.suppressed_tokens = suppressed;
  EXPECT_TRUE(CudaBatchSampler::NeedsHost(row)) << "suppressed tokens still need the host";
}

}  // namespace
}  // namespace blossom
