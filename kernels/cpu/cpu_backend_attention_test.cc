// The CPU backend's paged ALiBi attention (prefill chunks, decode over cached blocks, bf16 KV)
// against a dense reference in double, the KV write's checks, and step capture (the twin of CUDA
// graphs) with its padding slot.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_backend_test_util.h"

namespace blossom {
namespace {

using cpu_test::F32;
using cpu_test::I32;
using cpu_test::Random;

// ALiBi causal attention over paged KV against a dense reference in double.
struct SeqCase {
  int cached;   // tokens already in the cache before this step
  int num_new;  // tokens computed this step
};

// kv_dtype: the cache's (a bf16 cache rounds K and V when written, so the reference uses rounded
// K and V). pre_round_kv: round the K and V inputs to bf16 values before anything.
void RunAttentionCase(const std::vector<SeqCase>& seqs, int heads, int d, int block_size,
                      uint32_t seed, std::vector<float>* out_for_seq0 = nullptr,
                      DType kv_dtype = DType::kF32, bool pre_round_kv = false) {
  CpuBackend backend(3);
  const int num_seqs = seqs.size();
  int max_ctx = 0;
  for (auto& s : seqs) max_ctx = std::max(max_ctx, s.cached + s.num_new);
  const int max_blocks = (max_ctx + block_size - 1) / block_size;
  const int num_blocks = num_seqs * max_blocks + 3;
  KvCacheSpec spec{2, num_blocks, block_size, heads, d, kv_dtype};
  auto cache = backend.CreateKvCache(spec);
  ASSERT_TRUE(cache.ok());
  // Scatter each sequence over shuffled blocks.
  std::vector<int32_t> all_blocks(num_blocks);
  std::iota(all_blocks.begin(), all_blocks.end(), 0);
  std::shuffle(all_blocks.begin(), all_blocks.end(), std::mt19937(seed));
  std::vector<int32_t> tables(num_seqs * max_blocks, 0);
  for (int s = 0; s < num_seqs; ++s)
    for (int b = 0; b < max_blocks; ++b) tables[s * max_blocks + b] = all_blocks[s * max_blocks + b];
  // Full per-sequence q/k/v for every position.
  std::vector<std::vector<float>> qkv_full(num_seqs);
  std::vector<std::vector<float>> reference_qkv(num_seqs);
  auto round_kv = [&](std::vector<float>& v) {
    for (size_t row = 0; row < v.size() / (3 * d); ++row)
      for (int e = d; e < 3 * d; ++e) v[row * 3 * d + e] = BF16ToFloat(FloatToBF16(v[row * 3 * d + e]));
  };
  for (int s = 0; s < num_seqs; ++s) {
    qkv_full[s] = Random((seqs[s].cached + seqs[s].num_new) * heads * 3 * d, seed * 31 + s);
    if (pre_round_kv) round_kv(qkv_full[s]);
    reference_qkv[s] = qkv_full[s];
    if (kv_dtype == DType::kBF16) round_kv(reference_qkv[s]);
  }
  const int layer = 1;
  auto write_step = [&](bool cached_part, std::vector<float>* q_out,
                        std::vector<int32_t>* query_start, std::vector<int32_t>* ctx_len) {
    std::vector<float> qkv;
    std::vector<int32_t> slots;
    query_start->assign(1, 0);
    ctx_len->clear();
    for (int s = 0; s < num_seqs; ++s) {
      int begin = cached_part ? 0 : seqs[s].cached;
      int end = cached_part ? seqs[s].cached : seqs[s].cached + seqs[s].num_new;
      for (int p = begin; p < end; ++p) {
        qkv.insert(qkv.end(), qkv_full[s].begin() + p * heads * 3 * d,
                   qkv_full[s].begin() + (p + 1) * heads * 3 * d);
        slots.push_back(tables[s * max_blocks + p / block_size] * block_size + p % block_size);
      }
      query_start->push_back(query_start->back() + (end - begin));
      ctx_len->push_back(end);
    }
    const int tokens = slots.size();
    AttentionMetadata md;
    md.num_seqs = num_seqs;
    md.num_tokens = tokens;
    md.max_blocks_per_seq = max_blocks;
    md.query_start = I32(*query_start, {num_seqs + 1});
    md.context_len = I32(*ctx_len, {num_seqs});
    md.block_tables = I32(tables, {num_seqs, max_blocks});
    md.slot_mapping = I32(slots, {tokens});
    q_out->assign(std::max(1, tokens) * heads * d, 0.0f);
    if (tokens == 0) return md;
    EXPECT_TRUE(backend
                    .SplitQkvWriteCache(F32(qkv, {tokens, heads * 3 * d}), md, layer, **cache,
                                        F32(*q_out, {tokens, heads, d}))
                    .ok());
    return md;
  };
  std::vector<float> q;
  std::vector<int32_t> qs, cl;
  write_step(true, &q, &qs, &cl);  // the "earlier steps"
  AttentionMetadata md = write_step(false, &q, &qs, &cl);
  std::vector<float> slopes(heads);
  for (int h = 0; h < heads; ++h) slopes[h] = std::pow(2.0f, -(h + 1) * 8.0f / heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> out(md.num_tokens * heads * d);
  ASSERT_TRUE(backend
                  .Attention(F32(q, {md.num_tokens, heads, d}), md, layer, **cache,
                             F32(slopes, {heads}), scale, F32(out, {md.num_tokens, heads * d}))
                  .ok());
  if (out_for_seq0 != nullptr)
    out_for_seq0->assign(out.begin(), out.begin() + seqs[0].num_new * heads * d);
  // Dense reference.
  int row = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const auto& f = reference_qkv[s];
    for (int i = 0; i < seqs[s].num_new; ++i, ++row) {
      const int pos = seqs[s].cached + i;
      for (int h = 0; h < heads; ++h) {
        std::vector<double> score(pos + 1);
        double mx = -1e300;
        for (int j = 0; j <= pos; ++j) {
          double dot = 0;
          for (int e = 0; e < d; ++e)
            dot += double(f[(pos * heads + h) * 3 * d + e]) * f[(j * heads + h) * 3 * d + d + e];
          score[j] = double(slopes[h]) * j + dot * scale;
          mx = std::max(mx, score[j]);
        }
        double sum = 0;
        for (double& v : score) sum += (v = std::exp(v - mx));
        for (int e = 0; e < d; ++e) {
          double ref = 0;
          for (int j = 0; j <= pos; ++j)
            ref += score[j] / sum * f[(j * heads + h) * 3 * d + 2 * d + e];
          ASSERT_NEAR(out[(row * heads + h) * d + e], ref, 2e-5)
              << "seq " << s << " pos " << pos << " head " << h;
        }
      }
    }
  }
}

TEST(CpuBackendTest, AttentionPrefillOnly) { RunAttentionCase({{0, 7}}, 4, 8, 4, 1); }
TEST(CpuBackendTest, AttentionDecodeOverCachedBlocks) {
  RunAttentionCase({{13, 1}, {1, 1}, {16, 1}}, 3, 16, 4, 2);
}
TEST(CpuBackendTest, AttentionMixedPrefillChunksAndDecode) {
  RunAttentionCase({{5, 11}, {0, 3}, {30, 1}, {8, 8}}, 6, 12, 8, 3);
}

TEST(CpuBackendTest, AttentionOfASequenceDoesNotDependOnItsBatch) {
  std::vector<float> alone, batched;
  RunAttentionCase({{9, 4}}, 4, 8, 4, 7, &alone);
  RunAttentionCase({{9, 4}, {3, 9}, {20, 1}}, 4, 8, 4, 7, &batched);
  ASSERT_EQ(alone.size(), batched.size());
  EXPECT_EQ(0, std::memcmp(alone.data(), batched.data(), alone.size() * sizeof(float)));
}

// A bf16 KV cache (--kv-cache-dtype bf16): the same cases against the reference on rounded K and
// V, and bit for bit the fp32 cache's result for K and V inputs that are bf16 values already
// (rounding on write is the only change; attention runs on the rows widened exactly).
TEST(CpuBackendTest, Bf16KvCacheIsTheFp32CacheOnRoundedKeysAndValues) {
  RunAttentionCase({{13, 1}, {1, 1}, {16, 1}}, 3, 16, 4, 2, nullptr, DType::kBF16);
  RunAttentionCase({{5, 11}, {0, 3}, {30, 1}, {8, 8}}, 6, 12, 8, 3, nullptr, DType::kBF16);
  std::vector<float> bf16_cache, f32_cache, unrounded;
  RunAttentionCase({{5, 11}, {0, 3}, {30, 1}}, 4, 16, 4, 5, &bf16_cache, DType::kBF16);
  RunAttentionCase({{5, 11}, {0, 3}, {30, 1}}, 4, 16, 4, 5, &f32_cache, DType::kF32, /*pre_round_kv=*/true);
  RunAttentionCase({{5, 11}, {0, 3}, {30, 1}}, 4, 16, 4, 5, &unrounded, DType::kF32);
  ASSERT_EQ(bf16_cache.size(), f32_cache.size());
  EXPECT_EQ(0, std::memcmp(bf16_cache.data(), f32_cache.data(), f32_cache.size() * sizeof(float)));
  EXPECT_NE(bf16_cache, unrounded) << "the bf16 cache must round K and V";
}

TEST(CpuBackendTest, KvCacheDtypesAreF32OrBf16) {
  CpuBackend backend(1);
  EXPECT_TRUE(backend.SupportsKvCacheDtype(DType::kBF16, DType::kF32));
  EXPECT_FALSE(backend.SupportsKvCacheDtype(DType::kF16, DType::kF32));
  auto cache = backend.CreateKvCache(KvCacheSpec{1, 2, 4, 1, 2, DType::kF16});
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cache.status().message().find("f16"), std::string::npos) << cache.status();
}

TEST(CpuBackendTest, SplitQkvRejectsSlotsOutsideThePool) {
  CpuBackend backend(1);
  auto cache = backend.CreateKvCache(KvCacheSpec{1, 2, 4, 1, 2, DType::kF32});
  ASSERT_TRUE(cache.ok());
  std::vector<float> qkv(6), q(2);
  std::vector<int32_t> slots = {8}, qs = {0, 1}, cl = {1}, tables = {0};
  AttentionMetadata md;
  md.num_seqs = 1;
  md.num_tokens = 1;
  md.max_blocks_per_seq = 1;
  md.query_start = I32(qs, {2});
  md.context_len = I32(cl, {1});
  md.block_tables = I32(tables, {1, 1});
  md.slot_mapping = I32(slots, {1});
  absl::Status s = backend.SplitQkvWriteCache(F32(qkv, {1, 6}), md, 0, **cache, F32(q, {1, 1, 2}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("slot 8"), std::string::npos);
}

// ---- Step capture (the twin of CUDA graphs) and the padding slot captured steps use ----

TEST(CpuBackendCaptureTest, CapturedOpsRunOnlyAtReplayAndReadTheInputsOfThatMoment) {
  CpuBackend backend(2);
  ASSERT_TRUE(backend.SupportsCapture());
  std::vector<float> x = {1, 2, 3, 4}, residual = {10, 20, 30, 40}, probs(4, -1.0f);
  std::vector<int32_t> arg(2, -1);
  ASSERT_TRUE(backend.BeginCapture().ok());
  ASSERT_TRUE(backend.AddBiasResidual(F32(x, {2, 2}), Tensor(), F32(residual, {2, 2})).ok());
  ASSERT_TRUE(backend.Softmax(F32(x, {2, 2}), F32(probs, {2, 2})).ok());
  ASSERT_TRUE(backend.Argmax(F32(x, {2, 2}), I32(arg, {2})).ok());
  absl::StatusOr<std::unique_ptr<StepGraph>> graph = backend.EndCapture();
  ASSERT_TRUE(graph.ok()) << graph.status();
  // Nothing ran while capturing.
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(probs, (std::vector<float>(4, -1.0f)));

  for (const std::vector<float>& input :
       {std::vector<float>{1, 2, 3, 4}, std::vector<float>{9, 1, 0, 5}}) {
    x = input;  // new contents at the captured address, as a step uploads its inputs
    ASSERT_TRUE((*graph)->Replay().ok());
    std::vector<float> want_x = input, want_probs(4);
    std::vector<int32_t> want_arg(2);
    ASSERT_TRUE(backend.AddBiasResidual(F32(want_x, {2, 2}), Tensor(), F32(residual, {2, 2})).ok());
    ASSERT_TRUE(backend.Softmax(F32(want_x, {2, 2}), F32(want_probs, {2, 2})).ok());
    ASSERT_TRUE(backend.Argmax(F32(want_x, {2, 2}), I32(want_arg, {2})).ok());
    EXPECT_EQ(x, want_x);
    EXPECT_EQ(0, std::memcmp(probs.data(), want_probs.data(), probs.size() * sizeof(float)));
    EXPECT_EQ(arg, want_arg);
  }
}

TEST(CpuBackendCaptureTest, RefusesCopiesAllocationAndWaitsWhileCapturing) {
  CpuBackend backend(1);
  std::vector<float> host = {1, 2}, dev = {0, 0};
  ASSERT_TRUE(backend.BeginCapture().ok());
  EXPECT_EQ(backend.CopyToDevice(host.data(), F32(dev, {2})).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(backend.CopyToHost(F32(dev, {2}), host.data()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(backend.Allocate(64).status().code(), absl::StatusCode::kFailedPrecondition);
  const absl::Status wait = backend.Synchronize();
  EXPECT_EQ(wait.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(wait.message().find("Synchronize inside a step capture"), std::string::npos)
      << wait.message();
  EXPECT_EQ(dev, (std::vector<float>{0, 0}));
  ASSERT_TRUE(backend.EndCapture().ok());
  EXPECT_TRUE(backend.CopyToDevice(host.data(), F32(dev, {2})).ok());
  EXPECT_TRUE(backend.Allocate(64).ok());
  EXPECT_TRUE(backend.Synchronize().ok());
  EXPECT_EQ(dev, host);
}

TEST(CpuBackendCaptureTest, ErrorsOfCapturedOpsSurfaceAtReplay) {
  CpuBackend backend(1);
  std::vector<float> x = {1, 2, 3}, out(3);
  ASSERT_TRUE(backend.BeginCapture().ok());
  // Shapes do not match: accepted while capturing, refused when the op runs.
  ASSERT_TRUE(backend.Softmax(F32(x, {1, 3}), F32(out, {1, 2})).ok());
  absl::StatusOr<std::unique_ptr<StepGraph>> graph = backend.EndCapture();
  ASSERT_TRUE(graph.ok());
  EXPECT_EQ((*graph)->Replay().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuBackendCaptureTest, PaddingSlotWritesTheQueryButNoKeyOrValue) {
  CpuBackend backend(1);
  // 1 layer, 2 blocks of 2 tokens, 1 head of dim 2.
  auto cache = backend.CreateKvCache(KvCacheSpec{1, 2, 2, 1, 2, DType::kF32});
  ASSERT_TRUE(cache.ok());
  // Token 0 writes slot 1; token 1 is padding. Then token 2 reads slot 1 and the untouched
  // slot 0 (zeros) back through attention.
  std::vector<float> qkv = {1, 1, 5, 6, 7, 8, /*padding:*/ 2, 2, 50, 60, 70, 80}, q(4, -1.0f);
  std::vector<int32_t> slots = {1, kPaddingSlot}, qs = {0, 1, 2}, cl = {2, 1}, tables = {0, 0};
  AttentionMetadata md;
  md.num_seqs = 2;
  md.num_tokens = 2;
  md.max_query_len = 1;
  md.max_context_len = 2;
  md.max_blocks_per_seq = 1;
  md.query_start = I32(qs, {3});
  md.context_len = I32(cl, {2});
  md.block_tables = I32(tables, {2, 1});
  md.slot_mapping = I32(slots, {2});
  ASSERT_TRUE(backend.SplitQkvWriteCache(F32(qkv, {2, 6}), md, 0, **cache, F32(q, {2, 1, 2})).ok());
  EXPECT_EQ(q, (std::vector<float>{1, 1, 2, 2}));  // both queries written
  // Sequence 0 attends over slot 0 (never written: zeros) and slot 1 (5, 6 / 7, 8); sequence 1,
  // the padding row, over slot 0 only. Had the padding row written slot 0, its values would show.
  std::vector<float> slopes = {0.0f}, out(4);
  ASSERT_TRUE(
      backend.Attention(F32(q, {2, 1, 2}), md, 0, **cache, F32(slopes, {1}), 1.0f, F32(out, {2, 2}))
          .ok());
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 0.0f);
  // softmax([0, 11]) over values [0, 0] and [7, 8].
  const float w = 1.0f / (1.0f + std::exp(-11.0f));
  EXPECT_NEAR(out[0], 7.0f * w, 1e-5f);
  EXPECT_NEAR(out[1], 8.0f * w, 1e-5f);
  // Only -1 marks padding: other negative slots are still refused.
  slots[1] = -2;
  EXPECT_EQ(backend.SplitQkvWriteCache(F32(qkv, {2, 6}), md, 0, **cache, F32(q, {2, 1, 2})).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace blossom
