// Backend's host defaults (what the CPU backend uses): CopyColumns (unequal slices placed side
// by side, and the refusals) and AllocateHostStaging; KvCache ids.
#include "kernels/backend.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace blossom {
namespace {

TEST(CopyColumnsTest, PlacesUnequalSlicesSideBySide) {
  CpuBackend backend(1);
  // 10 columns over 3 "ranks": slices of 4, 3 and 3, as SliceForRank splits a vocabulary.
  const int64_t rows = 3, cols = 10;
  std::vector<float> out(rows * cols, -1.0f);
  const std::vector<int64_t> widths = {4, 3, 3};
  int64_t begin = 0;
  for (size_t s = 0; s < widths.size(); ++s) {
    std::vector<float> slice(rows * widths[s]);
    // Value r * 100 + (global column): the result is then easy to state.
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < widths[s]; ++c) slice[r * widths[s] + c] = r * 100 + begin + c;
    ASSERT_TRUE(backend
                    .CopyColumns(Tensor(slice.data(), DType::kF32, {rows, widths[s]}),
                                 Tensor(out.data(), DType::kF32, {rows, cols}), begin)
                    .ok());
    begin += widths[s];
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(out[r * cols + c], r * 100 + c) << r << "," << c;
}

TEST(CopyColumnsTest, RefusesWhatDoesNotFit) {
  CpuBackend backend(1);
  std::vector<float> src(2 * 4), dst(2 * 10);
  std::vector<int32_t> ints(2 * 4);
  const Tensor s(src.data(), DType::kF32, {2, 4}), d(dst.data(), DType::kF32, {2, 10});
  EXPECT_TRUE(backend.CopyColumns(s, d, 6).ok());
  EXPECT_EQ(backend.CopyColumns(s, d, 7).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend.CopyColumns(s, d, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend.CopyColumns(s, Tensor(dst.data(), DType::kF32, {4, 5}), 0).code(),
            absl::StatusCode::kInvalidArgument);  // rows differ
  EXPECT_EQ(backend.CopyColumns(Tensor(ints.data(), DType::kI32, {2, 4}), d, 0).code(),
            absl::StatusCode::kInvalidArgument);  // dtypes differ
  EXPECT_EQ(backend.CopyColumns(Tensor(src.data(), DType::kF32, {8}), d, 0).code(),
            absl::StatusCode::kInvalidArgument);  // not rank 2
}

TEST(HostStagingTest, IsAlignedWritableAndCopiesUp) {
  CpuBackend backend(1);
  for (size_t bytes : {size_t{4}, size_t{100}, size_t{4096}}) {
    absl::StatusOr<HostBuffer> staging = backend.AllocateHostStaging(bytes);
    ASSERT_TRUE(staging.ok()) << staging.status();
    ASSERT_NE(staging->get(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(staging->get()) % 64, 0u);
    const int64_t ints = static_cast<int64_t>(bytes / 4);
    std::vector<int32_t> want(ints);
    for (int64_t i = 0; i < ints; ++i) want[i] = static_cast<int32_t>(i * 7 - 3);
    std::memcpy(staging->get(), want.data(), bytes);
    std::vector<int32_t> device(ints);
    ASSERT_TRUE(
        backend.CopyToDevice(staging->get(), Tensor(device.data(), DType::kI32, {ints})).ok());
    EXPECT_EQ(device, want);
  }
}

TEST(KvCacheTest, IdsAreUniqueEvenWhenAnAddressIsReused) {
  CpuBackend backend(1);
  const KvCacheSpec spec{1, 2, 4, 1, 2, DType::kF32};
  std::vector<uint64_t> ids;
  for (int i = 0; i < 4; ++i) {
    auto cache = backend.CreateKvCache(spec);  // freed at the end of each iteration
    ASSERT_TRUE(cache.ok());
    ids.push_back((*cache)->id());
  }
  for (size_t i = 1; i < ids.size(); ++i) EXPECT_GT(ids[i], ids[i - 1]);
}

}  // namespace
}  // namespace blossom
