// CudaBackend basics on a real GPU: device and activation dtypes, allocation failures and free
// memory, KV block sizing, weight import (staging buffers, upcast, quantized modes refused), and
// the pinned host staging of step metadata.
//
// The fixture and data helpers: cuda_backend_test_util.h. Without a visible GPU every test reports
// SKIPPED with the reason.
#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend_test_util.h"

namespace blossom::cuda_backend_testing {
namespace {

// ---- Backend basics ----

TEST_F(CudaBackendTest, ReportsDeviceAndActivationDtypes) {
  EXPECT_EQ(gpu_->device(), DeviceKind::kCuda);
  EXPECT_EQ(gpu_->activation_dtype(DType::kBF16), DType::kBF16);
  EXPECT_EQ(gpu_->activation_dtype(DType::kF16), DType::kF16);
  EXPECT_EQ(gpu_->activation_dtype(DType::kF32), DType::kF32);
  std::printf("device: %s, GELU epilogue in use: f32 %d, f16 %d, bf16 %d\n", gpu_->device_name().c_str(),
              gpu_->gelu_epilogue_in_use(DType::kF32) ? 1 : 0, gpu_->gelu_epilogue_in_use(DType::kF16) ? 1 : 0,
              gpu_->gelu_epilogue_in_use(DType::kBF16) ? 1 : 0);
}

TEST_F(CudaBackendTest, AllocationFailureIsResourceExhaustedNamingTheBytes) {
  auto total = gpu_->TotalDeviceMemory();
  ASSERT_TRUE(total.ok());
  const size_t too_much = *total * 4;
  auto buf = gpu_->Allocate(too_much);
  ASSERT_FALSE(buf.ok());
  EXPECT_EQ(buf.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(buf.status().message().find(std::to_string(too_much)), std::string::npos) << buf.status();
  EXPECT_NE(buf.status().message().find("free"), std::string::npos) << buf.status();
  // The failure is not sticky: allocations go on, and Health() (what the engine asks after a
  // failed step) does not call the device unusable.
  auto ok = gpu_->Allocate(1 << 20);
  EXPECT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(gpu_->Health().ok()) << gpu_->Health();
}

TEST_F(CudaBackendTest, FreeMemoryShrinksByAnAllocation) {
  auto before = gpu_->FreeDeviceMemory();
  ASSERT_TRUE(before.ok());
  auto buf = gpu_->Allocate(512ull << 20);
  ASSERT_TRUE(buf.ok());
  auto after = gpu_->FreeDeviceMemory();
  ASSERT_TRUE(after.ok());
  EXPECT_LE(*after + (256ull << 20), *before);
}

TEST_F(CudaBackendTest, KvBlocksThatFitUsesTheFreeMemoryFraction) {
  auto free_bytes = gpu_->FreeDeviceMemory();
  ASSERT_TRUE(free_bytes.ok());
  const size_t per_block = 1 << 20;
  auto blocks = gpu_->KvBlocksThatFit(per_block, 0.5);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_NEAR(static_cast<double>(*blocks), 0.5 * *free_bytes / per_block, 0.02 * *free_bytes / per_block);
  EXPECT_EQ(gpu_->KvBlocksThatFit(per_block, 1.5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu_->KvBlocksThatFit(*free_bytes * 4, 1.0).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(CudaBackendTest, ImportWeightRoundTripsThroughTheStagingBuffers) {
  // 80 MB of bf16: several 32 MiB staging chunks, both buffers reused.
  const int64_t rows = 4096, cols = 10000;
  std::vector<uint16_t> host(rows * cols);
  std::mt19937 rng(7);
  for (auto& v : host) v = static_cast<uint16_t>(rng());
  for (int pass = 0; pass < 2; ++pass) {  // twice: the second starts with both buffers in use
    auto w = gpu_->ImportWeight(Tensor(host.data(), DType::kBF16, {rows, cols}));
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->tensor.dtype, DType::kBF16);
    std::vector<uint16_t> back(host.size());
    ASSERT_TRUE(gpu_->CopyToHost(w->tensor, back.data()).ok());
    EXPECT_TRUE(back == host);
  }
}

TEST_F(CudaBackendTest, HostStagingIsPinnedAndCopiesUp) {
  const int64_t n = 100000;
  absl::StatusOr<HostBuffer> staging = gpu_->AllocateHostStaging(n * sizeof(int32_t));
  ASSERT_TRUE(staging.ok()) << staging.status();
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, staging->get()), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost) << "pinned (page-locked) host memory";
  int32_t* host = static_cast<int32_t*>(staging->get());
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<int32_t>(i * 3 - 7);
  Tensor dev = Empty(DType::kI32, {n});
  ASSERT_TRUE(gpu_->CopyToDevice(host, dev).ok());
  ASSERT_TRUE(gpu_->Synchronize().ok());  // before the staging is written again
  const std::vector<int32_t> back = DownloadI32(dev);
  ASSERT_EQ(static_cast<int64_t>(back.size()), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], static_cast<int32_t>(i * 3 - 7)) << i;
}

TEST_F(CudaBackendTest, UpcastOptionImportsHalfWeightsAsF32) {
  CudaBackend::Options options;
  options.upcast_weights_to_f32 = true;
  auto backend = CudaBackend::Create(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->activation_dtype(DType::kBF16), DType::kF32);
  std::vector<float> v = RoundTo(Random(1000, 3), DType::kBF16);
  std::vector<char> raw = Encode(v, DType::kBF16);
  auto w = (*backend)->ImportWeight(Tensor(raw.data(), DType::kBF16, {10, 100}));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->tensor.dtype, DType::kF32);
  std::vector<float> back(v.size());
  ASSERT_TRUE((*backend)->CopyToHost(w->tensor, back.data()).ok());
  EXPECT_EQ(back, v);
}

// The contract for --quantize until CUDA kernels exist: a clear Unimplemented naming the mode and
// the backend (the server then refuses to start), never a silent dequantization.
TEST_F(CudaBackendTest, QuantizedImportIsUnimplementedAndNamesTheMode) {
  std::vector<char> raw = Encode(Random(64 * 32, 4), DType::kF32);
  const Tensor host(raw.data(), DType::kF32, {32, 64});
  for (WeightQuant quant : {WeightQuant::kInt8, WeightQuant::kInt4}) {
    auto w = gpu_->ImportLinearWeight(host, quant);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(w.status().message().find(WeightQuantName(quant)), std::string::npos) << w.status();
    EXPECT_NE(w.status().message().find("cuda"), std::string::npos) << w.status();
  }
  auto plain = gpu_->ImportLinearWeight(host, WeightQuant::kNone);
  EXPECT_TRUE(plain.ok()) << plain.status();
}

}  // namespace
}  // namespace blossom::cuda_backend_testing
