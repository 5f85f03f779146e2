#include "server/kv_fit.h"

#include <string>

#include "gtest/gtest.h"

namespace blossom {
namespace {

// bloom-560m's fp32 KV: 2 x 24 layers x 1024 x 4 bytes = 196,608 bytes per token.
constexpr size_t kBlock = 16 * 196608;

TEST(KvFitTest, APoolThatHoldsTheLimitKeepsIt) {
  auto fit = FitMaxTotalTokens(int64_t{1} << 30, kBlock, 16, 2048, true, "--kv_cache_mb");
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->max_total_tokens, 2048);
  EXPECT_EQ(fit->pool_tokens, 5456);
  EXPECT_TRUE(fit->warning.empty());
}

TEST(KvFitTest, TheDefaultLimitIsLoweredToThePool) {
  // 256 MiB holds 85 blocks: 1360 tokens.
  auto fit = FitMaxTotalTokens(int64_t{256} << 20, kBlock, 16, 2048, false, "--kv_cache_mb");
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->pool_tokens, 1360);
  EXPECT_EQ(fit->max_total_tokens, 1360);
  EXPECT_NE(fit->warning.find("holds 1360 tokens"), std::string::npos) << fit->warning;
  EXPECT_NE(fit->warning.find("--kv_cache_mb"), std::string::npos) << fit->warning;
}

TEST(KvFitTest, AGivenLimitThatDoesNotFitIsRefusedNamingBothFlags) {
  auto fit = FitMaxTotalTokens(int64_t{256} << 20, kBlock, 16, 2048, true, "--gpu_memory_fraction");
  ASSERT_FALSE(fit.ok());
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(fit.status().message());
  for (const char* part : {"--max_total_tokens 2048", "--gpu_memory_fraction", "at most 1360",
                           "196608 bytes per token"}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << ": " << message;
  }
}

TEST(KvFitTest, APoolWithoutABlockIsRefused) {
  auto fit = FitMaxTotalTokens(1000, kBlock, 16, 2048, false, "--kv_cache_mb");
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(std::string(fit.status().message()).find("not one block"), std::string::npos);
  EXPECT_FALSE(FitMaxTotalTokens(1 << 30, 0, 16, 2048, false, "--kv_cache_mb").ok());
}

}  // namespace
}  // namespace blossom
