#include "engine/loader/weight_copy.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "kernels/tensor.h"

namespace blossom {
namespace {

// A buffer whose data starts one byte past an aligned address: a view of it is misaligned for
// every dtype wider than a byte, as the tensors of an unpadded safetensors file are.
struct MisalignedBuffer {
  explicit MisalignedBuffer(const void* data, size_t bytes) : storage(bytes + 16) {
    std::memcpy(storage.data() + 1, data, bytes);
  }
  // operator new aligns storage for any fundamental type, so data() is misaligned for all.
  void* data() { return storage.data() + 1; }
  std::vector<char> storage;
};

TEST(WeightCopyTest, CopiesAMisalignedRowSliceIntoAlignedMemory) {
  std::vector<float> values(12);
  for (int i = 0; i < 12; ++i) values[i] = 0.5f * i;
  MisalignedBuffer buffer(values.data(), values.size() * sizeof(float));
  Tensor src(buffer.data(), DType::kF32, {4, 3});
  std::vector<char> storage;
  absl::StatusOr<Tensor> rows = CopyWeightBlock(src, 1, 3, 0, 3, DType::kF32, &storage);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->data, storage.data());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(rows->data) % alignof(float), 0u);
  EXPECT_EQ(rows->rank, 2);
  EXPECT_EQ(rows->dim(0), 2);
  EXPECT_EQ(rows->dim(1), 3);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(rows->as<float>()[i], 0.5f * (i + 3)) << i;
}

TEST(WeightCopyTest, CopiesAColumnSliceAndConvertsDTypes) {
  std::vector<uint16_t> halves;
  for (int i = 0; i < 8; ++i) halves.push_back(FloatToHalf(static_cast<float>(i) - 2.5f));
  MisalignedBuffer buffer(halves.data(), halves.size() * sizeof(uint16_t));
  Tensor src(buffer.data(), DType::kF16, {2, 4});
  std::vector<char> storage;
  absl::StatusOr<Tensor> f32 = CopyWeightBlock(src, 0, 2, 1, 3, DType::kF32, &storage);
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ(f32->dtype, DType::kF32);
  EXPECT_EQ(f32->dim(0), 2);
  EXPECT_EQ(f32->dim(1), 2);
  const std::vector<float> want = {-1.5f, -0.5f, 2.5f, 3.5f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(f32->as<float>()[i], want[i]) << i;

  // F32 -> BF16 rounds to nearest-even, as dtype.h's conversions.
  std::vector<float> wide = {1.0f, 1.00390625f, 3.0f};  // 1 + 2^-8 is a tie: rounds to 1.0
  std::vector<char> narrow;
  absl::StatusOr<Tensor> bf16 =
      CopyWeight(Tensor(wide.data(), DType::kF32, {3}), DType::kBF16, &narrow);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->rank, 1);
  EXPECT_EQ(BF16ToFloat(bf16->as<uint16_t>()[0]), 1.0f);
  EXPECT_EQ(BF16ToFloat(bf16->as<uint16_t>()[1]), 1.0f);
  EXPECT_EQ(BF16ToFloat(bf16->as<uint16_t>()[2]), 3.0f);
}

TEST(WeightCopyTest, TheCopySurvivesMovingItsStorage) {
  std::vector<float> values = {1, 2, 3, 4};
  std::vector<char> storage;
  absl::StatusOr<Tensor> copy =
      CopyWeight(Tensor(values.data(), DType::kF32, {2, 2}), DType::kF32, &storage);
  ASSERT_TRUE(copy.ok());
  std::vector<std::vector<char>> kept;
  kept.push_back(std::move(storage));
  EXPECT_EQ(copy->data, kept.back().data());
  EXPECT_EQ(copy->as<float>()[3], 4.0f);
}

TEST(WeightCopyTest, RefusesBadBlocksAndConversions) {
  std::vector<float> values(6);
  Tensor matrix(values.data(), DType::kF32, {2, 3});
  std::vector<char> storage;
  EXPECT_FALSE(CopyWeightBlock(matrix, 0, 3, 0, 3, DType::kF32, &storage).ok());  // rows
  EXPECT_FALSE(CopyWeightBlock(matrix, 1, 0, 0, 3, DType::kF32, &storage).ok());
  EXPECT_FALSE(CopyWeightBlock(matrix, 0, 2, 2, 4, DType::kF32, &storage).ok());  // columns
  std::vector<int32_t> ids(4);
  EXPECT_FALSE(CopyWeight(Tensor(ids.data(), DType::kI32, {4}), DType::kF32, &storage).ok());
  EXPECT_TRUE(CopyWeight(Tensor(ids.data(), DType::kI32, {4}), DType::kI32, &storage).ok());
  // A column slice of a rank-3 tensor is not a block this copies.
  std::vector<float> cube(8);
  EXPECT_FALSE(
      CopyWeightBlock(Tensor(cube.data(), DType::kF32, {2, 2, 2}), 0, 2, 0, 2, DType::kF32,
                      &storage)
          .ok());
}

}  // namespace
}  // namespace blossom
