#include "kernels/cpu/dot_tile.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

struct Case {
  std::vector<float> x;      // kMaxTileRows rows of k
  std::vector<uint16_t> w16; // kMaxTileCols rows of k (F16/BF16)
  std::vector<float> w32;    // the same weights, exactly, as fp32
};

Case MakeCase(DType dtype, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Case c;
  c.x.resize(kMaxTileRows * k);
  for (float& v : c.x) v = dist(rng);
  c.w32.resize(kMaxTileCols * k);
  for (float& v : c.w32) v = dist(rng);
  if (dtype != DType::kF32) {
    c.w16.resize(c.w32.size());
    ConvertFromF32(c.w32.data(), c.w16.data(), dtype, c.w32.size());
    ConvertToF32(c.w16.data(), dtype, c.w32.data(), c.w32.size());
  }
  return c;
}

const void* Weights(const Case& c, DType dtype) {
  return dtype == DType::kF32 ? static_cast<const void*>(c.w32.data()) : c.w16.data();
}

// Around the fp32 block (kDotBlock = 1024) and across several blocks with a short last one.
const int64_t kKs[] = {1, 7, 8, 9, 16, 64, 203, 255, 256, 257, 1016, 1023, 1024, 1025, 1032, 2056, 4100};
const DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// The portable path against a double-precision dot product, within the contract's error bound:
// each fp32 lane sums at most kDotBlock / 8 products before moving into fp64, so the error is at
// most (kDotBlock / 8 + 1) * u * sum |x_i w_i| plus the final rounding u * |result| (u = 2^-24).
TEST(DotTileTest, PortableMatchesDoubleReference) {
  for (DType dtype : kDtypes)
    for (int64_t k : kKs) {
      Case c = MakeCase(dtype, k, static_cast<uint32_t>(k));
      for (TileShape s : kTileShapes) {
        float dots[kMaxTileRows * kMaxTileCols];
        DotTilePortable(c.x.data(), k, s.rows, Weights(c, dtype), dtype, s.cols, k, dots,
                        kMaxTileCols);
        for (int r = 0; r < s.rows; ++r)
          for (int col = 0; col < s.cols; ++col) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < k; ++i) {
              ref += double(c.x[r * k + i]) * c.w32[col * k + i];
              mag += std::fabs(double(c.x[r * k + i]) * c.w32[col * k + i]);
            }
            const double u = std::ldexp(1.0, -24);
            ASSERT_NEAR(dots[r * kMaxTileCols + col], ref,
                        (kDotBlock / 8 + 1) * u * mag + u * std::fabs(ref) + 1e-30)
                << DTypeName(dtype) << " k " << k << " tile " << s.rows << "x" << s.cols;
          }
      }
    }
}

// Each element depends only on its two rows: every tile shape gives the 1x1 result.
TEST(DotTileTest, EveryTileShapeGivesTheSameBits) {
  for (DType dtype : kDtypes)
    for (int64_t k : kKs) {
      Case c = MakeCase(dtype, k, 7u + static_cast<uint32_t>(k));
      const size_t row_bytes = k * DTypeSize(dtype);
      for (TileShape s : kTileShapes) {
        float dots[kMaxTileRows * kMaxTileCols];
        DotTilePortable(c.x.data(), k, s.rows, Weights(c, dtype), dtype, s.cols, k, dots,
                        kMaxTileCols);
        for (int r = 0; r < s.rows; ++r)
          for (int col = 0; col < s.cols; ++col) {
            float one;
            DotTilePortable(c.x.data() + r * k, k, 1,
                            static_cast<const char*>(Weights(c, dtype)) + col * row_bytes, dtype,
                            1, k, &one, 1);
            ASSERT_EQ(0, std::memcmp(&one, &dots[r * kMaxTileCols + col], sizeof(float)))
                << DTypeName(dtype) << " k " << k << " tile " << s.rows << "x" << s.cols;
          }
      }
    }
}

// The AVX2 path must give exactly the portable path's bits, for every dtype, shape and K.
TEST(DotTileTest, Avx2IsBitIdenticalToPortable) {
  if (!DotTileAvx2Supported()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  for (DType dtype : kDtypes)
    for (int64_t k : kKs) {
      Case c = MakeCase(dtype, k, 99u + static_cast<uint32_t>(k));
      for (TileShape s : kTileShapes) {
        float want[kMaxTileRows * kMaxTileCols], got[kMaxTileRows * kMaxTileCols];
        DotTilePortable(c.x.data(), k, s.rows, Weights(c, dtype), dtype, s.cols, k, want,
                        kMaxTileCols);
        DotTileAvx2(c.x.data(), k, s.rows, Weights(c, dtype), dtype, s.cols, k, got,
                    kMaxTileCols);
        for (int r = 0; r < s.rows; ++r)
          ASSERT_EQ(0, std::memcmp(want + r * kMaxTileCols, got + r * kMaxTileCols,
                                   s.cols * sizeof(float)))
              << DTypeName(dtype) << " k " << k << " tile " << s.rows << "x" << s.cols;
      }
    }
}

// The AVX-512 path likewise (4-row tiles on its own kernels, the rest through AVX2's).
TEST(DotTileTest, Avx512IsBitIdenticalToPortable) {
  if (!DotTileAvx512Supported()) GTEST_SKIP() << "this CPU lacks AVX-512 (F, VL, DQ, BW)";
  for (DType dtype : kDtypes)
    for (int64_t k : kKs) {
      Case c = MakeCase(dtype, k, 199u + static_cast<uint32_t>(k));
      for (int cols : {1, 3, 4, 5, 8, 9, 12, 13, 17, 48, kMaxTileCols}) {
        for (int rows : {1, 4, kMaxTileRows}) {
          float want[kMaxTileRows * kMaxTileCols], got[kMaxTileRows * kMaxTileCols];
          DotTilePortable(c.x.data(), k, rows, Weights(c, dtype), dtype, cols, k, want,
                          kMaxTileCols);
          DotTileAvx512(c.x.data(), k, rows, Weights(c, dtype), dtype, cols, k, got,
                        kMaxTileCols);
          for (int r = 0; r < rows; ++r)
            ASSERT_EQ(0, std::memcmp(want + r * kMaxTileCols, got + r * kMaxTileCols,
                                     cols * sizeof(float)))
                << DTypeName(dtype) << " k " << k << " tile " << rows << "x" << cols;
        }
      }
    }
}

// A WeightPrefetch is a hint: with one, the AVX-512 tiles give the same bits, and they walk it one
// 64-byte line per 8 elements of k per weight-row group, never past its end (plus the last line).
TEST(DotTileTest, Avx512PrefetchLeavesResultsAndStaysInRange) {
  if (!DotTileAvx512Supported()) GTEST_SKIP() << "this CPU lacks AVX-512 (F, VL, DQ, BW)";
  const std::vector<char> next_block(64 * 1024);
  for (DType dtype : kDtypes)
    for (int64_t k : {int64_t{64}, int64_t{1032}}) {
      Case c = MakeCase(dtype, k, 77u + static_cast<uint32_t>(k));
      for (int rows : {4, kMaxTileRows})
        for (int64_t range : {int64_t{64 * 3}, static_cast<int64_t>(next_block.size())}) {
          const int cols = 13;
          float want[kMaxTileRows * kMaxTileCols], got[kMaxTileRows * kMaxTileCols];
          DotTileAvx512(c.x.data(), k, rows, Weights(c, dtype), dtype, cols, k, want,
                        kMaxTileCols);
          WeightPrefetch prefetch{next_block.data(), next_block.data() + range};
          DotTileAvx512(c.x.data(), k, rows, Weights(c, dtype), dtype, cols, k, got, kMaxTileCols,
                        &prefetch);
          for (int r = 0; r < rows; ++r)
            ASSERT_EQ(0, std::memcmp(want + r * kMaxTileCols, got + r * kMaxTileCols,
                                     cols * sizeof(float)))
                << DTypeName(dtype) << " k " << k << " rows " << rows;
          // Groups of weight rows (pairs and the odd one) each walk k / 8 steps.
          const int groups = rows == 4 ? 1 + 2 + 1 : 2 + 0 + 1;  // cols 13: 8+4+1 / 6+6+1
          const int64_t steps = groups * (k / 8);
          const int64_t walked = std::min<int64_t>(steps * 64, range);
          EXPECT_EQ(prefetch.next, next_block.data() + walked)
              << DTypeName(dtype) << " k " << k << " rows " << rows << " range " << range;
        }
    }
}

}  // namespace
}  // namespace blossom
