#include "kernels/cpu/weight_pairs.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

// Even and odd row counts (an odd last row stays as it is) and k of 1, 2 and many chunks.
TEST(WeightPairsTest, PackedElementsSitWhereTheIndexSaysAndUnpackRestoresTheRows) {
  for (int64_t n : {1, 2, 3, 5, 6, 7, 12, 13, 50}) {
    for (int64_t k : {8, 16, 1032}) {
      std::vector<float> rows(n * k);
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
      std::vector<float> packed(n * k, -1.0f);
      // In two ranges, as the backend's threads pack them.
      const int64_t split = n / 2 & ~int64_t{1};
      PackPairRows(rows.data(), DType::kF32, n, k, 0, split, packed.data());
      PackPairRows(rows.data(), DType::kF32, n, k, split, n, packed.data());
      for (int64_t c = 0; c < n; ++c)
        for (int64_t i = 0; i < k; ++i)
          ASSERT_EQ(packed[PairElementIndex(n, k, c, i)], rows[c * k + i])
              << "n " << n << " k " << k << " row " << c << " element " << i;
      // Every slot written exactly once: the index is a permutation, and a pair keeps its rows'
      // row-major place.
      std::vector<int> hits(n * k, 0);
      for (int64_t c = 0; c < n; ++c)
        for (int64_t i = 0; i < k; ++i) ++hits[PairElementIndex(n, k, c, i)];
      for (int h : hits) ASSERT_EQ(h, 1) << "n " << n << " k " << k;
      for (int64_t c = 0; c < n; c += 2) ASSERT_EQ(PairElementIndex(n, k, c, 0), c * k);
      std::vector<float> row(k);
      for (int64_t c = 0; c < n; ++c) {
        PairedRowToF32(packed.data(), DType::kF32, n, k, c, row.data());
        for (int64_t i = 0; i < k; ++i) ASSERT_EQ(row[i], rows[c * k + i]) << "row " << c;
      }
      for (int64_t c0 : {int64_t{0}, n / 3, n - 1}) {
        const int64_t count = n - c0;
        std::vector<float> out(count * k, -1.0f);
        UnpackPairRows(packed.data(), DType::kF32, n, k, c0, count, out.data());
        for (int64_t i = 0; i < count * k; ++i) ASSERT_EQ(out[i], rows[c0 * k + i]);
      }
    }
  }
}

TEST(WeightPairsTest, SixteenBitRowsMoveWhole) {
  const int64_t n = 7, k = 24;
  std::vector<uint16_t> rows(n * k), packed(n * k), out(n * k);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint16_t>(i * 7 + 1);
  PackPairRows(rows.data(), DType::kBF16, n, k, 0, n, packed.data());
  EXPECT_EQ(packed[PairElementIndex(n, k, 6, 9)], rows[6 * k + 9]);  // the odd last row, in place
  EXPECT_EQ(packed[2 * k + 16 + 8 + 3], rows[3 * k + 11]);  // row 3, element 11: pair 1, chunk 1
  UnpackPairRows(packed.data(), DType::kBF16, n, k, 0, n, out.data());
  EXPECT_EQ(out, rows);
}

TEST(WeightPairsTest, OnlyFloatMatricesWithWholeChunksPack) {
  EXPECT_TRUE(CanPackPairs(DType::kBF16, 3, 1024));
  EXPECT_FALSE(CanPackPairs(DType::kF32, 3, 1020));  // k not a multiple of 8
  EXPECT_FALSE(CanPackPairs(DType::kF32, 0, 1024));
  EXPECT_FALSE(CanPackPairs(DType::kQ8G32, 3, 1024));
  EXPECT_FALSE(CanPackPairs(DType::kF32Pairs, 3, 1024));
}

}  // namespace
}  // namespace blossom
