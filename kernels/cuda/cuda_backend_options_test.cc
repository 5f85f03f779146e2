// CudaBackend::Create's checks of its options, which run before any device call: a bad option is
// refused by name on every machine, with or without a GPU (so this test is not in the GPU suite).
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"

namespace blossom {
namespace {

TEST(CudaBackendOptionsTest, DecodeAttentionThreadsOutsideTheSupportedSizesAreRefused) {
  for (int32_t threads : {0, 64, 129, 1024}) {
    CudaBackend::Options options;
    options.decode_attention_threads = threads;
    const absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create(options);
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument) << backend.status();
    EXPECT_NE(backend.status().message().find("decode_attention_threads"), std::string::npos)
        << backend.status();
  }
}

}  // namespace
}  // namespace blossom
