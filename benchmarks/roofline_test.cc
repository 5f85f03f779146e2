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

}  // namespace
}  // namespace blossom
