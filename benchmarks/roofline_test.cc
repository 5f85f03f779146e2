#include "benchmarks/roofline.h"

#include "gtest/gtest.h"

namespace blossom {
namespace {

// Worked by hand: hidden 4, 1 layer, 2 heads, vocab 10.
//   params = 1 * (12*16 + 13*4) + 10*4 + 4*4 = 244 + 40 + 16 = 300
//   weights (bf16) = 600 bytes; KV per token (f32) = 2 * 1 layer * 4 * 4 bytes = 32 bytes
//   batch 2, 10 cached tokens per step: bytes = 600 + 320 = 920; flops = 2 * 300 * 2 = 1200
//   100 B/s -> memory floor 9.2 s; 1000 FLOP/s -> compute floor 1.2 s; memory bound
//   measured 18.4 s -> fraction 0.5 (memory), 1.2 / 18.4 (compute)
TEST(RooflineTest, HandComputedExample) {
  BloomShape shape{"custom", 4, 1, 2, 10};
  DecodeCost cost = DecodeCostOf(shape, DType::kBF16, DType::kF32);
  EXPECT_EQ(cost.params, 300);
  EXPECT_DOUBLE_EQ(cost.weight_bytes, 600.0);
  EXPECT_DOUBLE_EQ(cost.kv_bytes_per_token, 32.0);

  HardwareRates rates;
  rates.mem_bytes_per_s = 100.0;
  rates.gemm_flops_per_s = 1000.0;
  RooflinePoint p = ComputeRoofline(cost, rates, 2, 10.0, 18.4);
  EXPECT_DOUBLE_EQ(p.bytes_per_step, 920.0);
  EXPECT_DOUBLE_EQ(p.flops_per_step, 1200.0);
  EXPECT_DOUBLE_EQ(p.memory_floor_s, 9.2);
  EXPECT_DOUBLE_EQ(p.compute_floor_s, 1.2);
  EXPECT_DOUBLE_EQ(p.floor_s, 9.2);
  EXPECT_EQ(p.bound, "memory");
  EXPECT_DOUBLE_EQ(p.fraction, 0.5);
  EXPECT_DOUBLE_EQ(p.memory_fraction, 0.5);
  EXPECT_DOUBLE_EQ(p.compute_fraction, 1.2 / 18.4);
}

TEST(RooflineTest, LargeBatchesBecomeComputeBound) {
  // bloom-176b in bf16 with 8 GPUs worth of rates (8 x 2 TB/s, 8 x 989 TFLOP/s): batch 1024 of
  // one-token contexts is compute bound.
  DecodeCost cost = DecodeCostOf(*BloomShapeByName("176b"), DType::kBF16, DType::kBF16);
  EXPECT_DOUBLE_EQ(cost.weight_bytes, 2.0 * 176247271424.0);
  HardwareRates rates{16e12, 7912e12, "given", "given"};
  EXPECT_EQ(ComputeRoofline(cost, rates, 1, 110, 0.0).bound, "memory");
  EXPECT_EQ(ComputeRoofline(cost, rates, 1024, 1024.0, 0.0).bound, "compute");
  // ...but long contexts make the KV read dominate again (1024 x 110 tokens = 452 GB).
  EXPECT_EQ(ComputeRoofline(cost, rates, 1024, 1024 * 110.0, 0.0).bound, "memory");
  RooflinePoint unmeasured = ComputeRoofline(cost, rates, 1, 110, 0.0);
  EXPECT_EQ(unmeasured.fraction, 0.0);
  // 176B bf16 KV: 2 * 70 layers * 14336 * 2 bytes = 4,014,080 bytes per token.
  EXPECT_DOUBLE_EQ(cost.kv_bytes_per_token, 4014080.0);
}

// Worked by hand: hidden 4, 1 layer, vocab 10; prompts of 3 and 1 tokens.
//   per token: 2 * 1 * (12*16 + 9*4) = 456; attention: 4 * 1 * 4 * T(T+1)/2 = 16 T(T+1)/2
//   T=3: 456*3 + 16*6 + 2*10*4 = 1368 + 96 + 80 = 1544; T=1: 456 + 16 + 80 = 552; total 2096
//   1000 FLOP/s -> 2.096 s floor; measured 4.192 s -> half the GEMM rate
TEST(RooflineTest, PrefillFlopsByHand) {
  BloomShape shape{"custom", 4, 1, 2, 10};
  EXPECT_DOUBLE_EQ(PrefillFlops(shape, {3, 1}), 2096.0);
  HardwareRates rates;
  rates.gemm_flops_per_s = 1000.0;
  PrefillPoint p = ComputePrefillRoofline(shape, rates, {3, 1}, 4.192);
  EXPECT_DOUBLE_EQ(p.compute_floor_s, 2.096);
  EXPECT_DOUBLE_EQ(p.fraction, 0.5);
  EXPECT_DOUBLE_EQ(p.tflops, 2096.0 / 4.192 / 1e12);
  EXPECT_EQ(ComputePrefillRoofline(shape, rates, {3, 1}, 0.0).fraction, 0.0);
}

// BLOOM-7b1, one 2048-token prompt: 25.8 TFLOP (the linears 2 * 30 * 12 * 4096^2 * 2048 = 24.7,
// causal attention 1.0, the LM head's one row 0.002): what the GPU bench divides by.
TEST(RooflineTest, PrefillFlopsOf7b1At2048Tokens) {
  auto shape = BloomShapeByName("7b1");
  ASSERT_TRUE(shape.ok());
  const double flops = PrefillFlops(*shape, {2048});
  const double h = 4096, layers = 30;
  const double want = 2048 * 2 * layers * (12 * h * h + 9 * h) +
                      4 * layers * h * 2048.0 * 2049.0 / 2 + 2 * 250880.0 * h;
  EXPECT_DOUBLE_EQ(flops, want);
  EXPECT_GT(flops, 2.57e13);
  EXPECT_LT(flops, 2.59e13);
}

}  // namespace
}  // namespace blossom
