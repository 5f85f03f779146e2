#include "engine/loader/safetensors.h"

#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/loader/safetensors_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "kernels/tensor.h"

namespace blossom {
namespace {

using test_util::BF16Bytes;
using test_util::BuildRawSafetensors;
using test_util::BuildSafetensors;
using test_util::F16Bytes;
using test_util::F32Bytes;
using test_util::I32Bytes;
using test_util::I64Bytes;
using test_util::SafetensorsWriteOptions;
using test_util::TestTensor;
using ::testing::AllOf;
using ::testing::HasSubstr;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test_util::FreshTestDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  // Writes `bytes` as <dir>/<name> and opens it.
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> OpenBytes(
      const std::string& bytes, const std::string& name = "model.safetensors") {
    path_ = absl::StrCat(dir_, "/", name);
    absl::Status written = test_util::WriteTestFile(path_, bytes);
    if (!written.ok()) return written;
    return SafetensorsFile::Open(path_);
  }

  // Opens `bytes`, expects failure, and returns the message (which must name the file).
  std::string OpenError(const std::string& bytes) {
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = OpenBytes(bytes);
    if (file.ok()) {
      ADD_FAILURE() << "Open unexpectedly succeeded";
      return "";
    }
    std::string message(file.status().message());
    EXPECT_THAT(message, HasSubstr(path_)) << "error does not name the file";
    return message;
  }

  // Opens a file whose header is `header` and whose data section has `data_bytes` zero bytes.
  std::string HeaderError(const std::string& header, size_t data_bytes = 0) {
    return OpenError(BuildRawSafetensors(header, std::string(data_bytes, '\0')));
  }

  std::string dir_;
  std::string path_;
};

std::vector<TestTensor> SampleTensors() {
  return {
      {"h.0.mlp.dense_h_to_4h.weight", "F16", {2, 3}, F16Bytes({1, -2, 0.5f, 65504, 0, -0.25f})},
      {"word_embeddings.weight", "F32", {3, 2}, F32Bytes({1.5f, -2.25f, 3, 4, 5e-8f, -1e30f})},
      {"ln_f.weight", "BF16", {4}, BF16Bytes({1, -3.5f, 1e30f, 0.1f})},
      {"ids", "I32", {3}, I32Bytes({7, -1, 250879})},
      {"big_ids", "I64", {2}, I64Bytes({int64_t{1} << 40, -5})},
  };
}

// ---------------------------------------------------------------------------------------------
// Happy paths

TEST_F(SafetensorsTest, ViewsF32ExactValues) {
  auto file = OpenBytes(BuildSafetensors(SampleTensors()));
  ASSERT_TRUE(file.ok()) << file.status();
  const TensorEntry* entry = (*file)->Find("word_embeddings.weight");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->dtype_name, "F32");
  EXPECT_EQ(entry->shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(entry->bytes(), 24u);
  absl::StatusOr<Tensor> t = (*file)->View(*entry);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype, DType::kF32);
  EXPECT_EQ(t->device, DeviceKind::kHost);
  EXPECT_EQ(t->rank, 2);
  EXPECT_EQ(t->dim(0), 3);
  EXPECT_EQ(t->dim(1), 2);
  const float expected[] = {1.5f, -2.25f, 3, 4, 5e-8f, -1e30f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t->as<float>()[i], expected[i]) << i;
}

TEST_F(SafetensorsTest, ViewsF16AndBF16ExactBits) {
  auto file = OpenBytes(BuildSafetensors(SampleTensors()));
  ASSERT_TRUE(file.ok()) << file.status();

  absl::StatusOr<Tensor> f16 = (*file)->View(*(*file)->Find("h.0.mlp.dense_h_to_4h.weight"));
  ASSERT_TRUE(f16.ok()) << f16.status();
  EXPECT_EQ(f16->dtype, DType::kF16);
  const uint16_t f16_bits[] = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0000, 0xb400};
  const float f16_values[] = {1, -2, 0.5f, 65504, 0, -0.25f};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(f16->as<uint16_t>()[i], f16_bits[i]) << i;
    EXPECT_EQ(HalfToFloat(f16->as<uint16_t>()[i]), f16_values[i]) << i;
  }

  absl::StatusOr<Tensor> bf16 = (*file)->View(*(*file)->Find("ln_f.weight"));
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->dtype, DType::kBF16);
  EXPECT_EQ(bf16->rank, 1);
  EXPECT_EQ(bf16->as<uint16_t>()[0], 0x3f80);
  EXPECT_EQ(bf16->as<uint16_t>()[1], 0xc060);
  EXPECT_EQ(BF16ToFloat(bf16->as<uint16_t>()[1]), -3.5f);
  EXPECT_EQ(bf16->as<uint16_t>()[3], FloatToBF16(0.1f));
  EXPECT_EQ(bf16->as<uint16_t>()[3], 0x3dcd);  // 0.1 rounds up in bf16
}

TEST_F(SafetensorsTest, ViewsIntegers) {
  auto file = OpenBytes(BuildSafetensors(SampleTensors()));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<Tensor> i32 = (*file)->View(*(*file)->Find("ids"));
  ASSERT_TRUE(i32.ok()) << i32.status();
  EXPECT_EQ(i32->dtype, DType::kI32);
  EXPECT_EQ(i32->as<int32_t>()[2], 250879);
  absl::StatusOr<Tensor> i64 = (*file)->View(*(*file)->Find("big_ids"));
  ASSERT_TRUE(i64.ok()) << i64.status();
  EXPECT_EQ(i64->dtype, DType::kI64);
  EXPECT_EQ(i64->as<int64_t>()[0], int64_t{1} << 40);
  EXPECT_EQ(i64->as<int64_t>()[1], -5);
}

TEST_F(SafetensorsTest, EntriesAreSortedByOffsetAndPointIntoTheMapping) {
  SafetensorsWriteOptions options;
  options.metadata = {{"format", "pt"}};
  auto file = OpenBytes(BuildSafetensors(SampleTensors(), options));
  ASSERT_TRUE(file.ok()) << file.status();
  const auto& entries = (*file)->entries();
  ASSERT_EQ(entries.size(), 5u);
  // Written in SampleTensors() order, so offsets follow that order (not alphabetical).
  EXPECT_EQ(entries[0].name, "h.0.mlp.dense_h_to_4h.weight");
  EXPECT_EQ(entries[4].name, "big_ids");
  EXPECT_EQ(entries[0].begin, (*file)->data_begin());
  EXPECT_EQ((*file)->data_begin() % 8, 0u);  // writer pads the header with spaces
  EXPECT_EQ((*file)->misaligned_tensors(), 0u);
  for (size_t i = 1; i < entries.size(); ++i) EXPECT_EQ(entries[i].begin, entries[i - 1].end);
  EXPECT_EQ(entries.back().end, (*file)->file_size());
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  EXPECT_EQ((*file)->path(), path_);
  EXPECT_EQ((*file)->Find("missing"), nullptr);
  absl::StatusOr<Tensor> t = (*file)->View(entries[1]);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(static_cast<const uint8_t*>(t->data), (*file)->mapping().data() + entries[1].begin);
}

TEST_F(SafetensorsTest, HeaderWithoutPaddingAndTrailingSpaces) {
  SafetensorsWriteOptions options;
  options.align = 1;
  options.edit_header = [](std::string* h) { *h += "    "; };
  auto file = OpenBytes(BuildSafetensors({{"a", "F32", {1}, F32Bytes({7})}}, options));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<Tensor> t = (*file)->View(*(*file)->Find("a"));
  // data_begin = 8 + header length, which may be any value; F32 needs 4-byte alignment.
  if ((*file)->data_begin() % 4 == 0) {
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->as<float>()[0], 7.0f);
  } else {
    EXPECT_FALSE(t.ok());
  }
}

TEST_F(SafetensorsTest, ScalarAndEmptyTensors) {
  auto file = OpenBytes(BuildSafetensors({{"scalar", "F32", {}, F32Bytes({42})},
                                          {"empty", "F16", {0, 5}, ""},
                                          {"after", "I32", {1}, I32Bytes({9})}}));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<Tensor> scalar = (*file)->View(*(*file)->Find("scalar"));
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->rank, 0);
  EXPECT_EQ(scalar->numel(), 1);
  EXPECT_EQ(scalar->as<float>()[0], 42.0f);
  absl::StatusOr<Tensor> empty = (*file)->View(*(*file)->Find("empty"));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->numel(), 0);
  EXPECT_EQ(empty->dim(1), 5);
}

TEST_F(SafetensorsTest, HeaderOnlyFileHasNoTensors) {
  auto file = OpenBytes(BuildRawSafetensors("{}", ""));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->entries().empty());
}

TEST_F(SafetensorsTest, DTypeSizesMatchTheFormat) {
  EXPECT_EQ(SafetensorsDTypeSize("F64"), 8u);
  EXPECT_EQ(SafetensorsDTypeSize("F32"), 4u);
  EXPECT_EQ(SafetensorsDTypeSize("F16"), 2u);
  EXPECT_EQ(SafetensorsDTypeSize("BF16"), 2u);
  EXPECT_EQ(SafetensorsDTypeSize("I64"), 8u);
  EXPECT_EQ(SafetensorsDTypeSize("I32"), 4u);
  EXPECT_EQ(SafetensorsDTypeSize("I16"), 2u);
  EXPECT_EQ(SafetensorsDTypeSize("I8"), 1u);
  EXPECT_EQ(SafetensorsDTypeSize("U64"), 8u);
  EXPECT_EQ(SafetensorsDTypeSize("U32"), 4u);
  EXPECT_EQ(SafetensorsDTypeSize("U16"), 2u);
  EXPECT_EQ(SafetensorsDTypeSize("U8"), 1u);
  EXPECT_EQ(SafetensorsDTypeSize("BOOL"), 1u);
  EXPECT_EQ(SafetensorsDTypeSize("F8_E4M3"), 1u);
  EXPECT_EQ(SafetensorsDTypeSize("F8_E5M2"), 1u);
  EXPECT_EQ(SafetensorsDTypeSize("f32"), 0u);
  EXPECT_EQ(SafetensorsDTypeSize("Q4"), 0u);
}

TEST_F(SafetensorsTest, NonViewableDTypesStillLoad) {
  // A checkpoint may carry tensors the engine never views; size checks still apply to them.
  auto file = OpenBytes(BuildSafetensors({{"d", "F64", {2}, std::string(16, '\0')},
                                          {"b", "BOOL", {3}, std::string(3, '\1')},
                                          {"pad", "U8", {5}, std::string(5, '\0')},
                                          {"f8", "F8_E4M3", {2}, std::string(2, '\0')},
                                          {"u16", "U16", {1}, std::string(2, '\0')}}));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<Tensor> t = (*file)->View(*(*file)->Find("d"));
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(absl::IsUnimplemented(t.status()));
  EXPECT_THAT(std::string(t.status().message()),
              AllOf(HasSubstr(path_), HasSubstr("tensor 'd'"), HasSubstr("dtype F64"),
                    HasSubstr("supported: F32, F16, BF16, I32, I64")));
  t = (*file)->View(*(*file)->Find("b"));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("dtype BOOL"));
}

// ---------------------------------------------------------------------------------------------
// MappedFile

TEST_F(SafetensorsTest, MappedFileEmptyAndMissing) {
  std::string empty_path = absl::StrCat(dir_, "/empty");
  ASSERT_TRUE(test_util::WriteTestFile(empty_path, "").ok());
  absl::StatusOr<MappedFile> empty = MappedFile::Open(empty_path);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->size(), 0u);
  EXPECT_EQ(empty->data(), nullptr);
  EXPECT_TRUE(empty->Advise(0, 0, MADV_WILLNEED).ok());

  std::string missing = absl::StrCat(dir_, "/missing.safetensors");
  absl::StatusOr<MappedFile> none = MappedFile::Open(missing);
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(absl::IsNotFound(none.status()));
  EXPECT_THAT(std::string(none.status().message()),
              AllOf(HasSubstr(missing), HasSubstr("No such file or directory")));

  absl::StatusOr<MappedFile> dir = MappedFile::Open(dir_);
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(std::string(dir.status().message()),
              AllOf(HasSubstr(dir_), HasSubstr("not a regular file")));
}

TEST_F(SafetensorsTest, MappedFileMoveAndAdvise) {
  std::string path = absl::StrCat(dir_, "/data");
  ASSERT_TRUE(test_util::WriteTestFile(path, std::string(10000, 'x')).ok());
  absl::StatusOr<MappedFile> opened = MappedFile::Open(path);
  ASSERT_TRUE(opened.ok());
  MappedFile file = std::move(*opened);
  EXPECT_EQ(opened->data(), nullptr);  // moved-from is empty
  ASSERT_EQ(file.size(), 10000u);
  EXPECT_EQ(file.data()[9999], 'x');
  EXPECT_TRUE(file.Advise(5000, 5000, MADV_WILLNEED).ok());
  absl::Status bad = file.Advise(5000, 5001, MADV_WILLNEED);
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.message()), HasSubstr(path));
}

TEST_F(SafetensorsTest, MissingFile) {
  auto file = SafetensorsFile::Open(absl::StrCat(dir_, "/nope.safetensors"));
  ASSERT_FALSE(file.ok());
  EXPECT_TRUE(absl::IsNotFound(file.status()));
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("nope.safetensors"));
}

// ---------------------------------------------------------------------------------------------
// Validation at Open: one test per branch, each checking the message names what is wrong.

TEST_F(SafetensorsTest, ShorterThanLengthPrefix) {
  EXPECT_THAT(OpenError(""), AllOf(HasSubstr("file is 0 bytes"), HasSubstr("8-byte")));
  EXPECT_THAT(OpenError("abcde"), HasSubstr("file is 5 bytes"));
}

TEST_F(SafetensorsTest, HeaderLengthOverLimit) {
  std::string bytes = BuildRawSafetensors("{}", "");
  uint64_t n = 100000001;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  EXPECT_THAT(OpenError(bytes),
              AllOf(HasSubstr("header length 100000001"), HasSubstr("exceeds the limit")));
  bytes.assign(8, '\xff');  // 2^64 - 1: must not overflow 8 + N
  EXPECT_THAT(OpenError(bytes), HasSubstr("exceeds the limit"));
}

TEST_F(SafetensorsTest, HeaderLengthPastEndOfFile) {
  std::string bytes = BuildRawSafetensors("{}", "");
  bytes[0] = 100;
  EXPECT_THAT(OpenError(bytes), AllOf(HasSubstr("header length 100"),
                                      HasSubstr("past the end of the file (10 bytes")));
}

TEST_F(SafetensorsTest, HeaderNotUtf8) {
  EXPECT_THAT(HeaderError("{\"a\xff\": 1}"),
              AllOf(HasSubstr("not valid UTF-8"), HasSubstr("0xff"), HasSubstr("offset 3")));
}

TEST_F(SafetensorsTest, HeaderNotJson) {
  EXPECT_THAT(HeaderError("{\"a\": {\"dtype\": \"F32\", }"),
              AllOf(HasSubstr("header"), HasSubstr("invalid JSON"), HasSubstr("column")));
  EXPECT_THAT(HeaderError(""), HasSubstr("invalid JSON"));
  // Padding must be spaces after the JSON, not NULs.
  EXPECT_THAT(HeaderError(std::string("{}\0\0", 4)), HasSubstr("invalid JSON"));
}

TEST_F(SafetensorsTest, HeaderNotAnObject) {
  EXPECT_THAT(HeaderError("[1, 2]"), HasSubstr("header must be a JSON object, got array"));
  EXPECT_THAT(HeaderError("\"x\""), HasSubstr("header must be a JSON object, got string"));
}

TEST_F(SafetensorsTest, EntryNotAnObject) {
  EXPECT_THAT(HeaderError(R"({"w": [1, 2]})"),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("expected an object")));
}

TEST_F(SafetensorsTest, MissingOrMistypedDType) {
  EXPECT_THAT(HeaderError(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("missing field 'dtype'")));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})", 4),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("'dtype' must be a string, got number 4")));
}

TEST_F(SafetensorsTest, UnknownDType) {
  EXPECT_THAT(HeaderError(R"({"w": {"dtype": "F12", "shape": [1], "data_offsets": [0, 4]}})", 4),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("unknown dtype 'F12'")));
  // Case matters: "f32" is not a safetensors dtype.
  EXPECT_THAT(HeaderError(R"({"w": {"dtype": "f32", "shape": [1], "data_offsets": [0, 4]}})", 4),
              HasSubstr("unknown dtype 'f32'"));
}

TEST_F(SafetensorsTest, MissingOrMistypedShape) {
  EXPECT_THAT(HeaderError(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("missing field 'shape'")));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", 4),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("'shape' must be an array")));
}

TEST_F(SafetensorsTest, NegativeOrNonIntegerDims) {
  EXPECT_THAT(
      HeaderError(R"({"w": {"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 4]}})", 4),
      AllOf(HasSubstr("tensor 'w'"), HasSubstr("shape[1] must be a non-negative integer"),
            HasSubstr("-1")));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4),
              HasSubstr("shape[0] must be a non-negative integer, got number 1.5"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype": "F32", "shape": ["1"], "data_offsets": [0, 4]}})", 4),
              HasSubstr("shape[0] must be a non-negative integer, got string"));
  EXPECT_THAT(HeaderError(R"({"w": {"dtype": "F32", "shape": [18446744073709551615],
                                     "data_offsets": [0, 4]}})",
                          4),
              HasSubstr("shape[0] must be a non-negative integer"));
}

TEST_F(SafetensorsTest, OverflowingShape) {
  EXPECT_THAT(HeaderError(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296],
                                     "data_offsets": [0, 0]}})"),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("overflows")));
  // 2^62 * 4 bytes wraps to 0 in 64 bits: must not be accepted as an empty tensor.
  EXPECT_THAT(HeaderError(R"({"w": {"dtype": "F32", "shape": [4611686018427387904],
                                     "data_offsets": [0, 0]}})"),
              HasSubstr("overflows"));
}

TEST_F(SafetensorsTest, MissingOrMistypedDataOffsets) {
  EXPECT_THAT(HeaderError(R"({"w": {"dtype": "F32", "shape": [1]}})", 4),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("missing field 'data_offsets'")));
  for (const char* offsets : {"[0]", "[0, 4, 8]", "[-1, 4]", "[\"0\", 4]", "{}", "[0, 4.0]"}) {
    EXPECT_THAT(HeaderError(absl::StrCat(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": )",
                                         offsets, "}}"),
                            4),
                AllOf(HasSubstr("tensor 'w'"), HasSubstr("'data_offsets' must be an array of two")))
        << offsets;
  }
}

TEST_F(SafetensorsTest, EndBeforeBegin) {
  EXPECT_THAT(HeaderError(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}})", 4),
              AllOf(HasSubstr("tensor 'w'"), HasSubstr("data_offsets [4, 0)"),
                    HasSubstr("end before begin")));
}

TEST_F(SafetensorsTest, ByteLengthDoesNotMatchShape) {
  EXPECT_THAT(HeaderError(R"({"h.0.mlp.dense_h_to_4h.weight": {"dtype": "F16", "shape": [256, 64],
                       "data_offsets": [0, 1000]}})",
                          1000),
              AllOf(HasSubstr("tensor 'h.0.mlp.dense_h_to_4h.weight': data_offsets [0, 1000) do "
                              "not match dtype F16 and shape [256, 64] (expected 32768 bytes"),
                    HasSubstr(path_)));
}

TEST_F(SafetensorsTest, DataPastEndOfFile) {
  std::string bytes = BuildSafetensors(
      {{"a", "F32", {2}, F32Bytes({1, 2})}, {"b", "F32", {4}, F32Bytes({1, 2, 3, 4})}});
  bytes.resize(bytes.size() - 3);  // truncated download
  EXPECT_THAT(OpenError(bytes),
              AllOf(HasSubstr("tensor 'b'"), HasSubstr("data_offsets [8, 24)"),
                    HasSubstr("past the end of the file"), HasSubstr("truncated")));
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  EXPECT_THAT(HeaderError(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                              "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                          12),
              AllOf(HasSubstr("tensor 'b'"), HasSubstr("overlap tensor 'a'")));
  // Same range twice (aliasing) is an overlap too.
  EXPECT_THAT(HeaderError(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                              "b": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})",
                          8),
              AllOf(HasSubstr("overlap"), HasSubstr("'a'"), HasSubstr("'b'")));
}

TEST_F(SafetensorsTest, HoleBetweenTensors) {
  EXPECT_THAT(HeaderError(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                              "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                          12),
              AllOf(HasSubstr("hole"), HasSubstr("bytes [4, 8)"), HasSubstr("tensor 'b'"),
                    HasSubstr("after tensor 'a'")));
}

TEST_F(SafetensorsTest, HoleAtStartOfDataSection) {
  EXPECT_THAT(HeaderError(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8),
              AllOf(HasSubstr("hole"), HasSubstr("bytes [0, 4)"), HasSubstr("tensor 'a'"),
                    HasSubstr("must start at 0")));
}

TEST_F(SafetensorsTest, TrailingBytesAfterLastTensor) {
  std::string bytes = BuildSafetensors({{"a", "F32", {1}, F32Bytes({1})}});
  bytes += "junk";
  EXPECT_THAT(OpenError(bytes),
              AllOf(HasSubstr("4 trailing bytes"), HasSubstr("after the last tensor 'a'")));
  EXPECT_THAT(HeaderError("{}", 3), AllOf(HasSubstr("3 trailing bytes"), HasSubstr("no tensors")));
}

TEST_F(SafetensorsTest, DuplicateTensorNames) {
  EXPECT_THAT(HeaderError(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                              "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                          8),
              AllOf(HasSubstr("duplicate key 'a'"), HasSubstr("top-level")));
  EXPECT_THAT(
      HeaderError(
          R"({"a": {"dtype": "F32", "dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})", 4),
      AllOf(HasSubstr("duplicate key 'dtype'"), HasSubstr("object '/a'")));
}

TEST_F(SafetensorsTest, BadMetadata) {
  EXPECT_THAT(HeaderError(R"({"__metadata__": [1]})"),
              AllOf(HasSubstr("'__metadata__'"), HasSubstr("must be an object")));
  EXPECT_THAT(HeaderError(R"({"__metadata__": {"format": 1}})"),
              AllOf(HasSubstr("'__metadata__' key 'format'"), HasSubstr("must map to a string")));
}

// ---------------------------------------------------------------------------------------------
// View errors

TEST_F(SafetensorsTest, MisalignedDataIsRefused) {
  // A 1-byte U8 tensor first puts the F16 tensor at an odd offset (the header is padded to 8).
  auto file = OpenBytes(BuildSafetensors({{"pad", "U8", {1}, std::string(1, '\0')},
                                          {"w", "F16", {2}, F16Bytes({1, 2})},
                                          {"pad2", "U8", {1}, std::string(1, '\0')},
                                          {"x", "F32", {1}, F32Bytes({3})}}));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<Tensor> w = (*file)->View(*(*file)->Find("w"));
  ASSERT_FALSE(w.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(w.status()));
  EXPECT_THAT(std::string(w.status().message()),
              AllOf(HasSubstr(path_), HasSubstr("tensor 'w'"), HasSubstr("not aligned"),
                    HasSubstr("2-byte F16")));
  // x sits at data offset 6: 2-byte aligned but not 4-byte aligned.
  absl::StatusOr<Tensor> x = (*file)->View(*(*file)->Find("x"));
  ASSERT_FALSE(x.ok());
  EXPECT_THAT(std::string(x.status().message()), HasSubstr("4-byte F32"));
  // Counted at Open (the U8 pads are byte-sized, never misaligned), and viewed on request.
  EXPECT_EQ((*file)->misaligned_tensors(), 2u);
  absl::StatusOr<Tensor> allowed = (*file)->View(*(*file)->Find("x"), Misaligned::kAllow);
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_FALSE(IsAlignedView(*allowed));
  EXPECT_EQ(std::string(static_cast<const char*>(allowed->data), 4), F32Bytes({3}));
}

TEST_F(SafetensorsTest, RankAboveTensorMaxRank) {
  auto file = OpenBytes(BuildSafetensors({{"r5", "F32", {1, 1, 1, 1, 2}, F32Bytes({1, 2})}}));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<Tensor> t = (*file)->View(*(*file)->Find("r5"));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()),
              AllOf(HasSubstr("tensor 'r5'"), HasSubstr("rank 5"), HasSubstr("[1, 1, 1, 1, 2]")));
}

TEST_F(SafetensorsTest, ViewOfForeignEntryIsRefused) {
  auto file = OpenBytes(BuildSafetensors({{"a", "F32", {1}, F32Bytes({1})}}));
  ASSERT_TRUE(file.ok());
  TensorEntry forged = (*file)->entries()[0];
  forged.end = forged.begin + (uint64_t{1} << 40);
  absl::StatusOr<Tensor> t = (*file)->View(forged);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("does not belong to this file"));
}

// ---------------------------------------------------------------------------------------------
// Robustness: truncation at every length, and random header corruption.

TEST_F(SafetensorsTest, TruncationAtEveryLengthFailsCleanly) {
  SafetensorsWriteOptions options;
  options.metadata = {{"format", "pt"}};
  const std::string full = BuildSafetensors(SampleTensors(), options);
  const uint64_t header_len = full.size() - 24 - 24 - 8 - 12 - 16;
  ASSERT_GT(header_len, 8u);
  for (size_t length = 0; length < full.size(); ++length) {
    auto file = OpenBytes(full.substr(0, length));
    ASSERT_FALSE(file.ok()) << "truncated to " << length << " of " << full.size() << " bytes";
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(path_)) << length;
    // The reason depends on where the cut falls: prefix, header or data.
    const char* expected = length < 8                ? "shorter than the 8-byte"
                           : length < 8 + header_len ? "header length"
                                                     : "past the end of the file";
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(expected)) << length;
  }
  auto file = OpenBytes(full);
  ASSERT_TRUE(file.ok()) << file.status();
}

TEST_F(SafetensorsTest, RandomHeaderCorruptionNeverCrashes) {
  const std::string valid = BuildSafetensors(SampleTensors());
  const size_t header_end = valid.size() - (24 + 24 + 8 + 12 + 16);
  std::mt19937 rng(20240607);
  int opened = 0, failed = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::string bytes = valid;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      // Mostly the JSON text, sometimes the length prefix.
      size_t pos = rng() % 8 == 0 ? rng() % 8 : 8 + rng() % (header_end - 8);
      switch (rng() % 3) {
        case 0:  // flip one bit
          bytes[pos] = static_cast<char>(bytes[pos] ^ (1u << (rng() % 8)));
          break;
        case 1:  // random byte
          bytes[pos] = static_cast<char>(rng() & 0xff);
          break;
        default:  // a JSON-significant character, to reach deeper validation branches
          bytes[pos] = "0123456789[]{},:\"- e."[rng() % 21];
          break;
      }
    }
    auto file = OpenBytes(bytes);
    if (!file.ok()) {
      ++failed;
      EXPECT_FALSE(file.status().message().empty());
      continue;
    }
    ++opened;
    // Whatever was accepted must be self-consistent: views stay inside the mapping.
    const SafetensorsFile& f = **file;
    for (const TensorEntry& e : f.entries()) {
      ASSERT_LE(e.begin, e.end);
      ASSERT_LE(e.end, f.file_size());
      ASSERT_GE(e.begin, f.data_begin());
      absl::StatusOr<Tensor> t = f.View(e);
      if (t.ok() && t->numel() > 0) {
        volatile uint8_t last = static_cast<const uint8_t*>(t->data)[t->bytes() - 1];
        (void)last;
        ASSERT_EQ(t->bytes(), e.bytes());
      }
    }
  }
  EXPECT_GT(failed, 0);
  RecordProperty("opened", opened);
  RecordProperty("failed", failed);
}

}  // namespace
}  // namespace blossom
