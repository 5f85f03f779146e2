// CudaBackend's step capture (CUDA graphs): captured ops replay on new inputs with the bits of
// the same ops run uncaptured; copies, allocation and waits are refused while capturing; the
// padding slot of a captured step's filler rows writes its query but no K/V and raises no error.
//
// Without a visible GPU every test reports SKIPPED with the reason.
#include <cmath>
#include <vector>

#include "kernels/cuda/cuda_backend_test_util.h"

namespace blossom::cuda_backend_testing {
namespace {

TEST_F(CudaBackendTest, CapturedOpsReplayOnNewInputsWithTheUncapturedBits) {
  ASSERT_TRUE(gpu_->SupportsCapture());
  for (DType dt : kFloatTypes) {
    const int64_t m = 7, k = 64, n = 96;
    std::vector<float> w = RoundTo(Random(n * k, 1), dt), bias = RoundTo(Random(n, 2), dt);
    Tensor gw = Upload(w, dt, {n, k}), gb = Upload(bias, dt, {n});
    Tensor x = Upload(RoundTo(Random(m * k, 3), dt), dt, {m, k});
    Tensor y = Empty(dt, {m, n}), probs = Empty(DType::kF32, {m, n});
    auto issue = [&](Tensor in, Tensor lin, Tensor p) {
      EXPECT_TRUE(gpu_->Linear(in, gw, gb, Activation::kBloomGelu, lin).ok());
      EXPECT_TRUE(gpu_->Softmax(lin, p).ok());
    };
    issue(x, y, probs);  // once uncaptured: plans chosen, like a model's first step of a bucket
    ASSERT_TRUE(gpu_->Synchronize().ok());
    ASSERT_TRUE(gpu_->BeginCapture().ok());
    issue(x, y, probs);
    absl::StatusOr<std::unique_ptr<StepGraph>> graph = gpu_->EndCapture();
    ASSERT_TRUE(graph.ok()) << graph.status();
    for (uint32_t seed : {10u, 11u, 12u}) {
      const std::vector<float> input = RoundTo(Random(m * k, seed), dt);
      std::vector<char> raw = Encode(input, dt);
      ASSERT_TRUE(gpu_->CopyToDevice(raw.data(), x).ok());
      ASSERT_TRUE((*graph)->Replay().ok());
      Tensor want_y = Empty(dt, {m, n}), want_probs = Empty(DType::kF32, {m, n});
      issue(Upload(input, dt, {m, k}), want_y, want_probs);
      ASSERT_TRUE(gpu_->Synchronize().ok());
      EXPECT_TRUE(Near(Name("Graph.Linear", dt), Download(y), Download(want_y), 0.0)) << seed;
      EXPECT_TRUE(Near(Name("Graph.Softmax", dt), Download(probs), Download(want_probs), 0.0)) << seed;
    }
  }
}

TEST_F(CudaBackendTest, RefusesCopiesAllocationAndWaitsWhileCapturing) {
  std::vector<float> host = {1, 2};
  Tensor dev = Upload(host, DType::kF32, {2});
  ASSERT_TRUE(gpu_->Synchronize().ok());
  ASSERT_TRUE(gpu_->BeginCapture().ok());
  EXPECT_EQ(gpu_->BeginCapture().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gpu_->CopyToDevice(host.data(), dev).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gpu_->CopyToHost(dev, host.data()).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gpu_->Allocate(256).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gpu_->Synchronize().code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::unique_ptr<StepGraph>> graph = gpu_->EndCapture();
  EXPECT_TRUE(graph.ok()) << graph.status();
  // The stream works normally again.
  EXPECT_EQ(gpu_->EndCapture().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(gpu_->Synchronize().ok());
  EXPECT_EQ(Download(dev), host);
}

TEST_F(CudaBackendTest, PaddingSlotWritesTheQueryButNoKvAndRaisesNoError) {
  for (DType dt : kFloatTypes) {
    // 1 layer, 2 blocks of 2 tokens, 1 head of dim 8; token 0 writes slot 1, token 1 is padding.
    const KvCacheSpec spec{1, 2, 2, 1, 8, dt};
    auto gpu_cache = gpu_->CreateKvCache(spec);
    KvCacheSpec cpu_spec = spec;
    cpu_spec.dtype = DType::kF32;
    auto cpu_cache = cpu_.CreateKvCache(cpu_spec);
    ASSERT_TRUE(gpu_cache.ok() && cpu_cache.ok());
    std::vector<float> qkv = RoundTo(Random(2 * 24, 5), dt);
    std::vector<int32_t> slots = {1, kPaddingSlot}, qs = {0, 1, 2}, cl = {2, 1}, tables = {0, 0};
    std::vector<float> slopes = {0.25f};
    AttentionMetadata md;
    md.num_seqs = 2;
    md.num_tokens = 2;
    md.max_query_len = 1;
    md.max_context_len = 2;
    md.max_blocks_per_seq = 1;
    AttentionMetadata cpu_md = md;
    cpu_md.query_start = HostI32(qs, {3});
    cpu_md.context_len = HostI32(cl, {2});
    cpu_md.block_tables = HostI32(tables, {2, 1});
    cpu_md.slot_mapping = HostI32(slots, {2});
    md.query_start = UploadI32(qs, {3});
    md.context_len = UploadI32(cl, {2});
    md.block_tables = UploadI32(tables, {2, 1});
    md.slot_mapping = UploadI32(slots, {2});
    std::vector<float> cpu_q(16), cpu_out(16);
    ASSERT_TRUE(cpu_.SplitQkvWriteCache(HostF32(qkv, {2, 24}), cpu_md, 0, **cpu_cache, HostF32(cpu_q, {2, 1, 8})).ok());
    ASSERT_TRUE(cpu_.Attention(HostF32(cpu_q, {2, 1, 8}), cpu_md, 0, **cpu_cache, HostF32(slopes, {1}), 0.5f,
                               HostF32(cpu_out, {2, 8}))
                    .ok());
    Tensor q = Empty(dt, {2, 1, 8}), out = Empty(dt, {2, 8});
    ASSERT_TRUE(gpu_->SplitQkvWriteCache(Upload(qkv, dt, {2, 24}), md, 0, **gpu_cache, q).ok());
    ASSERT_TRUE(gpu_->Attention(q, md, 0, **gpu_cache, Upload(slopes, DType::kF32, {1}), 0.5f, out).ok());
    const absl::Status synced = gpu_->Synchronize();
    ASSERT_TRUE(synced.ok()) << synced << ": the padding slot must not raise the bad-slot flag";
    EXPECT_TRUE(Near(Name("PaddingSlot.q", dt), Download(q), cpu_q, 0.0));
    // The padding row attends over slot 0, never written (zeros): had it written slot 0, its
    // own values would show.
    EXPECT_TRUE(Near(Name("PaddingSlot.attention", dt), Download(out), cpu_out, Rtol(dt, true)));
  }
}

}  // namespace
}  // namespace blossom::cuda_backend_testing
