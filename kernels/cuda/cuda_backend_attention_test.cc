// Parity of CudaBackend's SplitQkvWriteCache + paged ALiBi attention with the CPU reference
// backend (prefill, split-KV decode over long scattered contexts, mixed steps) in F32, F16 and
// BF16, and a bad KV slot reported at the next Synchronize. F16/BF16 prefill with head_dim % 16
// == 0 runs on the tensor-core kernel; one case turns it off to check the CUDA-core kernel, one
// turns on the register-accumulator (mma.sync) kernel.
//
// Tolerances, and the "BLOSSOM_OP_ERROR {...}" lines each binary prints at the end:
// cuda_backend_test_util.h. Without a visible GPU every test reports SKIPPED with the reason.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_backend_test_util.h"

namespace blossom::cuda_backend_testing {
namespace {

// ---- SplitQkvWriteCache + Attention ----

struct SeqSpec {
  int32_t ctx;      // context length after this step
  int32_t num_new;  // new tokens this step
};

struct Metadata {
  std::vector<int32_t> query_start{0}, context_len, block_tables, slots;
  int32_t max_query = 0, max_context = 0, max_blocks = 0;
};

// Builds step metadata for tokens [first, first + count) of each sequence; tables[s] is its
// block table, padded to max_blocks.
Metadata MakeStep(const std::vector<std::pair<int32_t, int32_t>>& ranges,
                  const std::vector<std::vector<int32_t>>& tables, int32_t max_blocks, int32_t bs) {
  Metadata md;
  md.max_blocks = max_blocks;
  for (size_t s = 0; s < ranges.size(); ++s) {
    const auto [first, count] = ranges[s];
    md.query_start.push_back(md.query_start.back() + count);
    md.context_len.push_back(first + count);
    std::vector<int32_t> t = tables[s];
    t.resize(max_blocks, 0);
    md.block_tables.insert(md.block_tables.end(), t.begin(), t.end());
    for (int32_t p = first; p < first + count; ++p) md.slots.push_back(tables[s][p / bs] * bs + p % bs);
    md.max_query = std::max(md.max_query, count);
    md.max_context = std::max(md.max_context, first + count);
  }
  return md;
}

class AttentionParity : public CudaBackendTest {
 protected:
  AttentionMetadata HostMd(Metadata& m) {
    AttentionMetadata md;
    md.num_seqs = static_cast<int32_t>(m.context_len.size());
    md.num_tokens = static_cast<int32_t>(m.slots.size());
    md.max_query_len = m.max_query;
    md.max_context_len = m.max_context;
    md.max_blocks_per_seq = m.max_blocks;
    md.query_start = HostI32(m.query_start, {md.num_seqs + 1});
    md.context_len = HostI32(m.context_len, {md.num_seqs});
    md.block_tables = HostI32(m.block_tables, {md.num_seqs, m.max_blocks});
    md.slot_mapping = HostI32(m.slots, {md.num_tokens});
    return md;
  }
  AttentionMetadata DeviceMd(Metadata& m) {
    AttentionMetadata md = HostMd(m);
    md.query_start = UploadI32(m.query_start, {md.num_seqs + 1});
    md.context_len = UploadI32(m.context_len, {md.num_seqs});
    md.block_tables = UploadI32(m.block_tables, {md.num_seqs, m.max_blocks});
    md.slot_mapping = UploadI32(m.slots, {md.num_tokens});
    return md;
  }

  // Writes the history (positions before each sequence's new tokens), then runs one step of new
  // tokens through SplitQkvWriteCache + Attention on both backends and compares q and the output.
  void Run(DType dt, int32_t heads, int32_t d, const std::vector<SeqSpec>& seqs, uint32_t seed) {
    SCOPED_TRACE(testing::Message() << DTypeName(dt) << " heads " << heads << " d " << d << " seed " << seed);
    const int32_t bs = 16, layers = 2, layer = 1;
    int32_t blocks_total = 0, max_blocks = 0;
    for (const auto& s : seqs) {
      blocks_total += (s.ctx + bs - 1) / bs;
      max_blocks = std::max(max_blocks, (s.ctx + bs - 1) / bs);
    }
    const int32_t num_blocks = blocks_total + 5;
    std::vector<int32_t> pool(num_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(pool.begin(), pool.end(), rng);  // scattered block tables
    std::vector<std::vector<int32_t>> tables;
    size_t next = 0;
    for (const auto& s : seqs) {
      tables.emplace_back(pool.begin() + next, pool.begin() + next + (s.ctx + bs - 1) / bs);
      next += (s.ctx + bs - 1) / bs;
    }
    KvCacheSpec spec;
    spec.num_layers = layers;
    spec.num_blocks = num_blocks;
    spec.block_size = bs;
    spec.num_heads = heads;
    spec.head_dim = d;
    spec.dtype = DType::kF32;
    auto cpu_cache = cpu_.CreateKvCache(spec);
    ASSERT_TRUE(cpu_cache.ok());
    spec.dtype = dt;
    auto gpu_cache = gpu_->CreateKvCache(spec);
    ASSERT_TRUE(gpu_cache.ok()) << gpu_cache.status();
    EXPECT_EQ((*gpu_cache)->spec().dtype, dt);
    const int64_t row = static_cast<int64_t>(heads) * 3 * d;
    double max_abs_qkv = 0.0;  // of the history and the step: bounds |q|, |k| and |v|

    auto split_both = [&](Metadata& m, uint32_t data_seed, std::vector<float>* q_cpu, Tensor* q_gpu,
                          AttentionMetadata* dmd) {
      const int64_t T = static_cast<int64_t>(m.slots.size());
      std::vector<float> qkv = RoundTo(Random(T * row, data_seed), dt);
      for (float v : qkv) max_abs_qkv = std::max(max_abs_qkv, static_cast<double>(std::fabs(v)));
      q_cpu->assign(T * heads * d, 0.0f);
      AttentionMetadata hmd = HostMd(m);
      ASSERT_TRUE(cpu_.SplitQkvWriteCache(HostF32(qkv, {T, row}), hmd, layer, **cpu_cache,
                                          HostF32(*q_cpu, {T, heads * d}))
                      .ok());
      *dmd = DeviceMd(m);
      *q_gpu = Empty(dt, {T, heads * d});
      absl::Status s = gpu_->SplitQkvWriteCache(Upload(qkv, dt, {T, row}), *dmd, layer, **gpu_cache, *q_gpu);
      ASSERT_TRUE(s.ok()) << s;
    };

    // History: everything before the new tokens, in one step (no attention needed).
    std::vector<std::pair<int32_t, int32_t>> hist, step;
    std::vector<std::vector<int32_t>> hist_tables;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i].ctx > seqs[i].num_new) {
        hist.push_back({0, seqs[i].ctx - seqs[i].num_new});
        hist_tables.push_back(tables[i]);
      }
      step.push_back({seqs[i].ctx - seqs[i].num_new, seqs[i].num_new});
    }
    if (!hist.empty()) {
      Metadata hm = MakeStep(hist, hist_tables, max_blocks, bs);
      std::vector<float> q_cpu;
      Tensor q_gpu;
      AttentionMetadata dmd;
      split_both(hm, seed + 1, &q_cpu, &q_gpu, &dmd);
    }
    Metadata sm = MakeStep(step, tables, max_blocks, bs);
    std::vector<float> q_cpu;
    Tensor q_gpu;
    AttentionMetadata dmd;
    split_both(sm, seed + 2, &q_cpu, &q_gpu, &dmd);
    EXPECT_TRUE(Near(Name("SplitQkv.q", dt), Download(q_gpu), q_cpu, 0.0));

    std::vector<float> slopes(heads);
    for (int32_t h = 0; h < heads; ++h) slopes[h] = std::pow(2.0f, -8.0f * (h + 1) / heads);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const int64_t T = static_cast<int64_t>(sm.slots.size());
    std::vector<float> ref(T * heads * d);
    AttentionMetadata hmd = HostMd(sm);
    ASSERT_TRUE(cpu_.Attention(HostF32(q_cpu, {T, heads * d}), hmd, layer, **cpu_cache, HostF32(slopes, {heads}),
                               scale, HostF32(ref, {T, heads * d}))
                    .ok());
    Tensor out = Empty(dt, {T, heads * d});
    absl::Status s = gpu_->Attention(q_gpu, dmd, layer, **gpu_cache, Upload(slopes, DType::kF32, {heads}), scale, out);
    ASSERT_TRUE(s.ok()) << s;
    const char* kind = sm.max_query == 1 ? "Attention.decode" : "Attention.prefill";
    const double atol = AlibiScoreAtol(*std::max_element(slopes.begin(), slopes.end()), sm.max_context,
                                       max_abs_qkv, d, scale);
    EXPECT_TRUE(Near(Name(kind, dt), Download(out), ref, Rtol(dt, true), atol));
    ASSERT_TRUE(gpu_->Synchronize().ok());
  }
};

TEST_F(AttentionParity, PrefillOnly) {
  for (DType dt : kFloatTypes) {
    Run(dt, 4, 16, {{7, 7}}, 100);
    Run(dt, 1, 64, {{129, 129}}, 101);
    Run(dt, 6, 7, {{33, 33}, {20, 20}}, 102);  // odd head_dim
    Run(dt, 2, 256, {{40, 40}}, 103);
    Run(dt, 16, 80, {{1, 1}, {17, 17}}, 104);
  }
}

TEST_F(AttentionParity, DecodeOverLongScatteredContexts) {
  for (DType dt : kFloatTypes) {
    // 256 keys per decode partition: 256/257 and 512/513 straddle a split, 2048 uses eight.
    Run(dt, 4, 64, {{1, 1}, {17, 1}, {256, 1}, {257, 1}, {512, 1}, {513, 1}, {2048, 1}, {1000, 1}}, 200);
    Run(dt, 32, 128, {{300, 1}, {16, 1}}, 201);
    Run(dt, 3, 80, {{700, 1}}, 202);
    Run(dt, 2, 256, {{600, 1}}, 203);  // head_dim above the block's thread count
    Run(dt, 5, 7, {{100, 1}, {1500, 1}}, 204);
  }
}

// More decode sequences than a grid dimension holds (65,535): the launch runs them in slices
// (a warm-up step of --max_batched_tokens placeholder rows is one such step). The last ones
// split their contexts, so the slices' split-KV scratch is exercised too.
TEST_F(AttentionParity, DecodeOfMoreSequencesThanAGridDimension) {
  std::vector<SeqSpec> seqs(65535 + 9, SeqSpec{1, 1});
  for (size_t i = seqs.size() - 3; i < seqs.size(); ++i) seqs[i] = {300, 1};
  Run(DType::kF32, 1, 16, seqs, 210);
}

// Decode blocks of 256 and 512 threads (CudaBackend::Options::decode_attention_threads): the
// vector path (head sizes 64, 80, 128, 256: more lane groups than keys in a short partition)
// and the scalar one (head size 7), single and split partitions.
TEST_F(AttentionParity, DecodeOnWiderBlocks) {
  for (int32_t threads : {256, 512}) {
    CudaBackend::Options options;
    options.decode_attention_threads = threads;
    ASSERT_NO_FATAL_FAILURE(UseBackend(options));
    for (DType dt : kFloatTypes) {
      Run(dt, 4, 64, {{1, 1}, {17, 1}, {256, 1}, {257, 1}, {2048, 1}, {1000, 1}}, 210 + threads);
      Run(dt, 32, 128, {{300, 1}, {16, 1}, {2000, 1}}, 211 + threads);
      Run(dt, 3, 80, {{700, 1}}, 212 + threads);
      Run(dt, 2, 256, {{600, 1}}, 213 + threads);
      Run(dt, 5, 7, {{100, 1}, {1500, 1}}, 214 + threads);
    }
  }
}

TEST_F(AttentionParity, MixedPrefillChunksAndDecode) {
  for (DType dt : kFloatTypes) {
    Run(dt, 8, 64, {{300, 129}, {50, 1}, {2000, 1}, {7, 7}}, 300);
    Run(dt, 4, 96, {{129, 7}, {1, 1}, {640, 33}}, 301);
    // The BLOOM-7b1 head size; a 600-token chunk over 500 cached tokens spans ten 64-query tiles
    // and seventeen 64-key chunks of the tensor-core kernel.
    Run(dt, 4, 128, {{1100, 600}, {70, 70}, {900, 1}}, 302);
  }
}

// f16/bf16 prefill with head_dim % 16 == 0 runs on tensor cores by default (attention_tc.cu):
// the CUDA-core prefill kernel, which serves every other case, is checked on the same shapes.
TEST_F(AttentionParity, PrefillOnCudaCoresWhenTensorCoresAreOff) {
  CudaBackend::Options options;
  options.tensor_core_attention = false;
  ASSERT_NO_FATAL_FAILURE(UseBackend(options));
  for (DType dt : {DType::kF16, DType::kBF16}) {
    Run(dt, 4, 64, {{300, 129}, {50, 1}, {7, 7}}, 400);
    Run(dt, 4, 128, {{1100, 600}, {70, 70}}, 401);
  }
}

// The register-accumulator (mma.sync) prefill kernel (CudaBackend::Options::mma_prefill_attention,
// the default, stated here) on every head size it serves (64, 80, 96, 128; 32 falls back to the
// WMMA kernel), prefill-only and mixed steps, chunks over cached tokens, the 7b1 head size at a
// 600-token chunk, and rows of a tile past a short sequence's end: against the CPU at the 16-bit
// tolerances.
TEST_F(AttentionParity, PrefillOnTheMmaKernel) {
  CudaBackend::Options options;
  options.mma_prefill_attention = true;
  ASSERT_NO_FATAL_FAILURE(UseBackend(options));
  for (DType dt : {DType::kF16, DType::kBF16}) {
    for (int32_t d : {32, 64, 80, 96, 128}) Run(dt, 2, d, {{70, 70}, {5, 5}}, 500 + d);
    Run(dt, 4, 64, {{300, 129}, {50, 1}, {7, 7}}, 501);
    Run(dt, 8, 64, {{300, 129}, {50, 1}, {2000, 1}, {7, 7}}, 502);
    Run(dt, 4, 128, {{1100, 600}, {70, 70}, {900, 1}}, 503);
    Run(dt, 3, 128, {{64, 64}, {65, 65}, {1, 1}, {130, 3}}, 504);
  }
}

// The WMMA prefill kernel, which serves the head sizes the mma.sync one does not (and every size
// with mma_prefill_attention off), on the BLOOM head sizes too.
TEST_F(AttentionParity, PrefillOnTheWmmaKernelWhenMmaIsOff) {
  CudaBackend::Options options;
  options.mma_prefill_attention = false;
  ASSERT_NO_FATAL_FAILURE(UseBackend(options));
  for (DType dt : {DType::kF16, DType::kBF16}) {
    Run(dt, 8, 64, {{300, 129}, {50, 1}, {2000, 1}, {7, 7}}, 600);
    Run(dt, 4, 128, {{1100, 600}, {70, 70}, {900, 1}}, 601);
  }
}

TEST_F(CudaBackendTest, BadSlotIsReportedAtTheNextSynchronize) {
  KvCacheSpec spec;
  spec.num_layers = 1;
  spec.num_blocks = 2;
  spec.block_size = 16;
  spec.num_heads = 2;
  spec.head_dim = 8;
  spec.dtype = DType::kF32;
  auto cache = gpu_->CreateKvCache(spec);
  ASSERT_TRUE(cache.ok());
  std::vector<int32_t> qs = {0, 1}, cl = {1}, bt = {0}, slots = {32};  // pool has 32 slots
  AttentionMetadata md;
  md.num_seqs = 1;
  md.num_tokens = 1;
  md.max_query_len = 1;
  md.max_context_len = 1;
  md.max_blocks_per_seq = 1;
  md.query_start = UploadI32(qs, {2});
  md.context_len = UploadI32(cl, {1});
  md.block_tables = UploadI32(bt, {1, 1});
  md.slot_mapping = UploadI32(slots, {1});
  ASSERT_TRUE(gpu_->SplitQkvWriteCache(Empty(DType::kF32, {1, 48}), md, 0, **cache, Empty(DType::kF32, {1, 16})).ok());
  absl::Status s = gpu_->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("slot"), std::string::npos) << s;
  EXPECT_TRUE(gpu_->Synchronize().ok());  // reported once, then cleared
}

}  // namespace
}  // namespace blossom::cuda_backend_testing
