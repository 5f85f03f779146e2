#include "benchmarks/cpu/read_bandwidth.h"

#include <cmath>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"

namespace blossom {
namespace {

// Every path reads every word once, whatever the length's remainder after its unrolled loop.
TEST(ReadBandwidthTest, EveryWidthSumsEveryWordOnce) {
  std::vector<ReadWidth> widths = {ReadWidth::kScalar};
  if (CpuHasAvx2Fma()) widths.push_back(ReadWidth::kAvx2);
  if (CpuHasAvx512()) widths.push_back(ReadWidth::kAvx512);
  for (size_t length : {0, 1, 3, 15, 16, 17, 31, 32, 33, 100, 1031}) {
    std::vector<uint64_t> words(length);
    for (size_t i = 0; i < length; ++i) words[i] = 0x9e3779b97f4a7c15ull * (i + 1);
    const uint64_t want = std::accumulate(words.begin(), words.end(), uint64_t{0});
    for (ReadWidth width : widths) {
      EXPECT_EQ(SumWords(words.data(), words.data() + length, width), want)
          << ReadWidthName(width) << " over " << length << " words";
    }
  }
}

TEST(ReadBandwidthTest, WidestWidthMatchesTheCpu) {
  const ReadWidth width = WidestReadWidth();
  EXPECT_EQ(width == ReadWidth::kAvx512, CpuHasAvx512());
  if (!CpuHasAvx512()) EXPECT_EQ(width == ReadWidth::kAvx2, CpuHasAvx2Fma());
}

TEST(ReadBandwidthTest, MeasuresAPositiveRate) {
  const double gbs = ReadBandwidthGbs(8 << 20, 2, 2);
  EXPECT_TRUE(std::isfinite(gbs));
  EXPECT_GT(gbs, 0.0);
  EXPECT_EQ(ReadBandwidthGbs(0, 2), 0.0);
}

}  // namespace
}  // namespace blossom
