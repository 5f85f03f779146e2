// CudaBatchSampler::DeviceRow, the host side of a GPU sampling row: runs without a GPU (so it is
// not in the GPU suite). A row carries the token histories only when a penalty will read them,
// since the GPU sampler copies, checks and uploads every token a row carries; step 1's edits
// travel with it.
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
    return CudaBatchSampler::DeviceRow(row, nullptr);
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

// Step 1's edits travel with the row: the allow mask as a view of the edits' words (31 KB per
// row at BLOOM's vocabulary, copied once, into the upload), bans and biases as copies.
TEST(CudaBatchSamplerRowsTest, CarriesStepOnesEdits) {
  SamplingParams params;
  params.allowed_token_ids = {4, 70};
  params.logit_bias = {{70, 2.5f}};
  params.bad_words_token_ids = {{9}};
  const std::vector<int32_t> suppressed = {1};
  RequestRng rng(uint64_t{3});
  SampleRow row;
  row.params = &params;
  row.context.suppressed_tokens = suppressed;
  row.rng = &rng;
  ASSERT_TRUE(HasLogitEdits(params, row.context));
  LogitEdits edits;
  ASSERT_TRUE(BuildLogitEdits(params, row.context, 100, &edits).ok());
  const cuda::SamplingRow device = CudaBatchSampler::DeviceRow(row, &edits);
  EXPECT_EQ(device.allowed.data(), edits.allowed.data());
  EXPECT_EQ(device.allowed.size(), 2u);
  EXPECT_EQ(device.allowed[0], uint64_t{1} << 4);
  EXPECT_EQ(device.allowed[1], uint64_t{1} << (70 - 64));
  EXPECT_EQ(device.banned, (std::vector<int32_t>{9, 1}));
  ASSERT_EQ(device.bias.size(), 1u);
  EXPECT_EQ(device.bias[0].token, 70);
  EXPECT_EQ(device.bias[0].bias, 2.5f);
  EXPECT_EQ(device.logprobs, -1);

  const cuda::SamplingRow plain = CudaBatchSampler::DeviceRow(row, nullptr);
  EXPECT_TRUE(plain.allowed.empty());
  EXPECT_TRUE(plain.banned.empty());
  EXPECT_TRUE(plain.bias.empty());
}

}  // namespace
}  // namespace blossom
