// BloomModel's step graphs (EnableStepGraphs) on the CPU backend, whose captures record the ops
// and replay them: every step of a model with graphs gives the bits of the same step on a model
// without, through captures, replays, padding to the bucket, steps that do not qualify, and the
// recaptures after the workspace or the KV cache changed.
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "engine/model/bloom_model.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

constexpr int32_t kBlockSize = 4;
constexpr int32_t kBlocksPerSeq = 12;
constexpr int32_t kSeqs = 5;

// A CPU backend whose allocations fail while `fail_if(bytes)` says so (a device out of memory).
class FailableCpuBackend : public CpuBackend {
 public:
  FailableCpuBackend() : CpuBackend(2) {}
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override {
    if (fail_if && fail_if(bytes)) return absl::ResourceExhaustedError("test: out of memory");
    return CpuBackend::Allocate(bytes);
  }
  std::function<bool(size_t)> fail_if;
};

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> table;
  int32_t computed = 0;
};

class StepGraphsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = FixturePath("models/bloom-tiny-h4");
    for (auto* model : {&graphed_, &eager_}) {
      auto loaded = BloomModel::Load(dir, &backend_, nullptr);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      *model = std::move(*loaded);
    }
    StepGraphOptions options;
    options.max_batch = 4;
    options.max_context = 24;  // 6 blocks of 4
    ASSERT_TRUE(graphed_->EnableStepGraphs(options).ok());
    NewCaches();
    // Sequence s owns blocks s, s + kSeqs, s + 2 kSeqs, ...: scattered and interleaved.
    const std::vector<std::vector<int32_t>> prompts = {
        {1, 17, 250},
        {3, 99, 1024, 7, 512, 33, 2047},
        {5},
        {8, 8, 300, 41, 1999, 6, 9, 10, 11, 12, 13, 14},
        {20, 21, 22, 23, 24}};
    for (int32_t s = 0; s < kSeqs; ++s) {
      seqs_[s].tokens = prompts[s];
      for (int32_t i = 0; i < kBlocksPerSeq; ++i) seqs_[s].table.push_back(i * kSeqs + s);
    }
  }

  void NewCaches() {
    for (auto [model, cache] :
         {std::pair{graphed_.get(), &graphed_cache_}, std::pair{eager_.get(), &eager_cache_}}) {
      auto created = model->CreateKvCache(kSeqs * kBlocksPerSeq, kBlockSize);
      ASSERT_TRUE(created.ok()) << created.status();
      *cache = std::move(*created);
    }
  }

  // Runs `batch` on both models; expects the same logits bit for bit; returns them.
  std::vector<float> RunBoth(const StepBatch& batch) {
    const int64_t vocab = eager_->vocab_size();
    std::vector<float> graphed(std::max<size_t>(1, batch.logit_rows.size()) * vocab, -1.0f);
    std::vector<float> eager(graphed.size(), -2.0f);
    absl::Status s = graphed_->Forward(batch, *graphed_cache_, graphed.data());
    EXPECT_TRUE(s.ok()) << s;
    s = eager_->Forward(batch, *eager_cache_, eager.data());
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(std::memcmp(graphed.data(), eager.data(), graphed.size() * sizeof(float)), 0)
        << "step of " << batch.num_seqs() << " sequences, " << batch.num_tokens() << " tokens";
    return eager;
  }

  // The whole prompt (whatever of it is not computed yet) of each of `which`, in one step.
  void Prefill(const std::vector<int32_t>& which) {
    StepBatch batch;
    batch.max_blocks_per_seq = kBlocksPerSeq;
    for (int32_t s : which) {
      Seq& q = seqs_[s];
      batch.AddSequence(absl::MakeConstSpan(q.tokens).subspan(q.computed), q.computed, q.table,
                        true);
    }
    Append(which, RunBoth(batch));
  }

  // One decode step of `which` (each feeds its last token), in that order.
  void Decode(const std::vector<int32_t>& which) {
    StepBatch batch;
    batch.max_blocks_per_seq = kBlocksPerSeq;
    for (int32_t s : which) {
      Seq& q = seqs_[s];
      ASSERT_EQ(q.computed + 1, static_cast<int32_t>(q.tokens.size()));
      batch.AddSequence({q.tokens.back()}, q.computed, q.table, true);
    }
    Append(which, RunBoth(batch));
  }

  // Each of `which` computed its pending tokens and gets the greedy token of its logits row.
  void Append(const std::vector<int32_t>& which, const std::vector<float>& logits) {
    const int64_t vocab = eager_->vocab_size();
    for (size_t i = 0; i < which.size(); ++i) {
      Seq& q = seqs_[which[i]];
      q.computed = static_cast<int32_t>(q.tokens.size());
      const float* row = logits.data() + i * vocab;
      q.tokens.push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
    }
  }

  FailableCpuBackend backend_;
  std::unique_ptr<BloomModel> graphed_, eager_;
  std::unique_ptr<KvCache> graphed_cache_, eager_cache_;
  Seq seqs_[kSeqs];
};

TEST_F(StepGraphsTest, EveryStepGivesTheUncapturedBitsAndOnlyDecodeStepsReplay) {
  Prefill({0, 1, 2, 3, 4});
  EXPECT_EQ(graphed_->step_graph_stats().captured, 0) << "a prefill step is never captured";
  for (int i = 0; i < 4; ++i) Decode({0, 1, 2});  // bucket 4, one padding row
  StepGraphStats stats = graphed_->step_graph_stats();
  EXPECT_EQ(stats.captured, 1);
  EXPECT_EQ(stats.replayed, 3);
  for (int i = 0; i < 3; ++i) Decode({4});     // bucket 1
  for (int i = 0; i < 3; ++i) Decode({2, 0});  // bucket 2, in another order
  Decode({0, 1, 2});                           // bucket 4 again: a replay
  stats = graphed_->step_graph_stats();
  EXPECT_EQ(stats.captured, 3);
  EXPECT_EQ(stats.replayed, 3 + 2 + 2 + 1);
  // Five sequences are over max_batch (4): uncaptured, and the buckets stay as they were.
  Decode({0, 1, 2, 3, 4});
  EXPECT_EQ(graphed_->step_graph_stats().replayed, stats.replayed);
  EXPECT_EQ(graphed_->step_graph_stats().captured, stats.captured);
  // A mixed step (a prompt chunk and a decode token) is not a decode step.
  seqs_[3].tokens.insert(seqs_[3].tokens.end(), {40, 41, 42});
  StepBatch mixed;
  mixed.max_blocks_per_seq = kBlocksPerSeq;
  mixed.AddSequence(absl::MakeConstSpan(seqs_[3].tokens).subspan(seqs_[3].computed),
                    seqs_[3].computed, seqs_[3].table, true);
  mixed.AddSequence({seqs_[4].tokens.back()}, seqs_[4].computed, seqs_[4].table, true);
  Append({3, 4}, RunBoth(mixed));
  EXPECT_EQ(graphed_->step_graph_stats().replayed, stats.replayed);
  EXPECT_EQ(graphed_->step_graph_stats().failed, 0);
}

TEST_F(StepGraphsTest, ContextsLongerThanMaxContextRunUncaptured) {
  Prefill({1, 3});
  // Sequence 3 (12-token prompt) passes 24 tokens of context after 12 decode steps; sequence 1
  // (7 tokens) stays within.
  int64_t replayed_before_long = -1;
  for (int i = 0; i < 16; ++i) {
    const bool long_context = seqs_[3].computed + 1 > 24;
    if (long_context && replayed_before_long < 0)
      replayed_before_long = graphed_->step_graph_stats().replayed;
    Decode({1, 3});
  }
  ASSERT_GE(replayed_before_long, 1);
  EXPECT_EQ(graphed_->step_graph_stats().replayed, replayed_before_long)
      << "no step with a context beyond max_context may replay";
  EXPECT_EQ(graphed_->step_graph_stats().captured, 1);
}

TEST_F(StepGraphsTest, RecapturesAfterTheWorkspaceGrowsOrTheCacheChanges) {
  Prefill({0, 2});
  for (int i = 0; i < 3; ++i) Decode({0, 2});
  EXPECT_EQ(graphed_->step_graph_stats().captured, 1);
  // A 30-token prompt needs a larger step workspace than the graphs were captured with (sized
  // for 4 tokens): its reallocation must drop them, or their replays would read freed memory.
  for (int t = 0; t < 30; ++t) seqs_[1].tokens.push_back(100 + t);
  Prefill({1});
  for (int i = 0; i < 3; ++i) Decode({0, 2});
  EXPECT_EQ(graphed_->step_graph_stats().captured, 2);
  EXPECT_EQ(graphed_->step_graph_stats().replayed, 2 + 2);
  // A new KV cache (the runner's AllocateKvCache): the graphs held the old one's addresses.
  NewCaches();
  for (Seq& q : seqs_) {
    q.tokens.resize(q.computed + 1);  // keep the prompt and the tokens so far; recompute all
    q.computed = 0;
  }
  Prefill({0, 2});
  for (int i = 0; i < 2; ++i) Decode({0, 2});
  EXPECT_EQ(graphed_->step_graph_stats().captured, 3);
  EXPECT_EQ(graphed_->step_graph_stats().replayed, 4 + 1);
}

// A step with more logit rows than the workspace holds grows it; a growth the device cannot give
// is all or nothing: it first asks for twice the capacity, then for exactly what the step needs,
// and when neither fits it keeps the old buffers (which the captured graphs hold) untouched, so
// the next decode steps replay them safely (a partial replacement left the graphs writing freed
// buffers: run under ASan to see it).
TEST_F(StepGraphsTest, AWorkspaceGrowthThatFailsLeavesTheGraphsValid) {
  Prefill({0, 1, 2, 3, 4});  // 5 logit rows: the workspace holds 5
  for (int i = 0; i < 2; ++i) Decode({0, 1, 2});
  ASSERT_EQ(graphed_->step_graph_stats().captured, 1);
  const size_t row_bytes = static_cast<size_t>(eager_->vocab_size()) * sizeof(float);
  // Seq 3 scores 9 more tokens: 9 logit rows. Doubling (10 rows) does not fit; 9 rows do.
  std::vector<int32_t> more = {60, 61, 62, 63, 64, 65, 66, 67, 68};
  Seq& q = seqs_[3];
  StepBatch scored;
  scored.max_blocks_per_seq = kBlocksPerSeq;
  scored.AddSequence(more, q.computed, q.table, true, /*all_logits=*/true);
  backend_.fail_if = [&](size_t bytes) { return bytes == 10 * row_bytes; };
  RunBoth(scored);
  q.tokens.pop_back();
  q.tokens.insert(q.tokens.end(), more.begin(), more.end());
  q.computed = static_cast<int32_t>(q.tokens.size());
  q.tokens.push_back(7);
  Decode({0, 1, 2});  // the grown workspace dropped the graph: captured again
  const int64_t captured = graphed_->step_graph_stats().captured;
  ASSERT_EQ(captured, 2);
  // Now neither 18 nor 10 rows fit: the step fails and nothing of the workspace changes.
  more.resize(10);
  StepBatch too_many;
  too_many.max_blocks_per_seq = kBlocksPerSeq;
  too_many.AddSequence(more, q.computed, q.table, true, /*all_logits=*/true);
  backend_.fail_if = [&](size_t bytes) { return bytes == 18 * row_bytes || bytes == 10 * row_bytes; };
  std::vector<float> ignored(10 * eager_->vocab_size());
  EXPECT_EQ(graphed_->Forward(too_many, *graphed_cache_, ignored.data()).code(),
            absl::StatusCode::kResourceExhausted);
  backend_.fail_if = nullptr;
  for (int i = 0; i < 2; ++i) Decode({0, 1, 2});  // replays, same bits as the eager model
  EXPECT_EQ(graphed_->step_graph_stats().captured, captured) << "the graph is still valid";
}

TEST_F(StepGraphsTest, WarmUpCapturesEveryBucketAndWritesNoKv) {
  // After the prompts are in the cache: had a placeholder step written K/V (block 0 slot 0 is
  // sequence 0's first position), sequence 0's logits would no longer match.
  Prefill({0, 1, 2});
  ASSERT_TRUE(graphed_->WarmUpStepGraphs(*graphed_cache_).ok());
  EXPECT_EQ(graphed_->step_graph_stats().captured, 3) << "buckets 1, 2 and 4 (max_batch 4)";
  EXPECT_EQ(graphed_->step_graph_stats().replayed, 0);
  for (int i = 0; i < 3; ++i) Decode({0, 1, 2});
  Decode({0});
  Decode({1, 2});
  EXPECT_EQ(graphed_->step_graph_stats().captured, 3) << "every step replays";
  EXPECT_EQ(graphed_->step_graph_stats().replayed, 5);
  // Warming up again captures nothing new.
  ASSERT_TRUE(graphed_->WarmUpStepGraphs(*graphed_cache_).ok());
  EXPECT_EQ(graphed_->step_graph_stats().captured, 3);
  EXPECT_EQ(eager_->WarmUpStepGraphs(*eager_cache_).code(), absl::StatusCode::kFailedPrecondition);
}

// A CPU backend that asks for a GEMM warm-up at some row counts (as the CUDA backend does for its
// cuBLASLt plans) and records the rows of every Linear call.
class WarmUpCpuBackend : public CpuBackend {
 public:
  WarmUpCpuBackend() : CpuBackend(2) {}
  std::vector<int64_t> WarmUpRowCounts(int64_t max_rows) const override {
    std::vector<int64_t> rows;
    for (int64_t m : {1, 3, 40}) {
      if (m <= max_rows) rows.push_back(m);
    }
    return rows;
  }
  absl::Status Linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                      Activation activation, Tensor out) override {
    linear_rows.push_back(x.dim(0));
    return CpuBackend::Linear(x, weight, bias, activation, out);
  }
  std::vector<int64_t> linear_rows;
};

TEST(StepGraphsWarmUpTest, LinearPlansRunAtTheBackendsRowCountsAndWriteNoKv) {
  const std::string dir = FixturePath("models/bloom-tiny-h4");
  WarmUpCpuBackend warm_backend;
  CpuBackend plain_backend(2);
  auto warm = BloomModel::Load(dir, &warm_backend, nullptr);
  auto plain = BloomModel::Load(dir, &plain_backend, nullptr);
  ASSERT_TRUE(warm.ok() && plain.ok());
  auto warm_cache = (*warm)->CreateKvCache(16, kBlockSize);
  auto plain_cache = (*plain)->CreateKvCache(16, kBlockSize);
  ASSERT_TRUE(warm_cache.ok() && plain_cache.ok());
  const std::vector<int32_t> prompt = {1, 17, 250, 3, 99}, table = {0, 1, 2, 3};
  StepBatch prefill;
  prefill.max_blocks_per_seq = 4;
  prefill.AddSequence(prompt, 0, table, true);
  const int64_t vocab = (*plain)->vocab_size();
  std::vector<float> a(vocab), b(vocab);
  ASSERT_TRUE((*warm)->Forward(prefill, **warm_cache, a.data()).ok());
  ASSERT_TRUE((*plain)->Forward(prefill, **plain_cache, b.data()).ok());
  // 24-token steps, at most 2 logit rows: rows 1 and 3 (40 is beyond 24); each placeholder step
  // runs 4 Linears per layer plus the LM head on min(M, 2) rows.
  warm_backend.linear_rows.clear();
  ASSERT_TRUE((*warm)->WarmUpLinearPlans(**warm_cache, 24, 2).ok());
  const int64_t layers = (*warm)->config().n_layer;
  std::vector<int64_t> want;
  for (int64_t m : {1, 3}) {
    for (int64_t i = 0; i < 4 * layers; ++i) want.push_back(m);
    want.push_back(std::min<int64_t>(m, 2));
  }
  EXPECT_EQ(warm_backend.linear_rows, want);
  // The placeholder rows wrote no K/V: block 0 holds the prompt's first positions.
  StepBatch decode;
  decode.max_blocks_per_seq = 4;
  decode.AddSequence({42}, static_cast<int32_t>(prompt.size()), table, true);
  ASSERT_TRUE((*warm)->Forward(decode, **warm_cache, a.data()).ok());
  ASSERT_TRUE((*plain)->Forward(decode, **plain_cache, b.data()).ok());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// A CPU backend that holds its callers to the staging contract of a GPU backend
// (Backend::AllocateHostStaging): a copy up from pinned staging is an asynchronous DMA, so the
// staging must not be written again before the next wait for the device (Synchronize, or a
// CopyToHost, which waits). The CPU backend copies at once and cannot show the race itself, so
// this one remembers the bytes of each copy from staging and counts the copies whose source
// changed before a wait.
class StagingContractCpuBackend : public CpuBackend {
 public:
  StagingContractCpuBackend() : CpuBackend(2) {}
  absl::StatusOr<HostBuffer> AllocateHostStaging(size_t bytes) override {
    absl::StatusOr<HostBuffer> buffer = CpuBackend::AllocateHostStaging(bytes);
    if (buffer.ok()) staging_.push_back({static_cast<char*>(buffer->get()), bytes});
    return buffer;
  }
  absl::Status CopyToDevice(const void* host, Tensor dst) override {
    CountRewritten();
    const char* src = static_cast<const char*>(host);
    for (const auto& [begin, bytes] : staging_) {
      if (src >= begin && src < begin + bytes) {
        pending_.push_back({src, std::vector<char>(src, src + dst.bytes())});
      }
    }
    return CpuBackend::CopyToDevice(host, dst);
  }
  absl::Status CopyToHost(const Tensor& src, void* host) override {
    Waited();
    return CpuBackend::CopyToHost(src, host);
  }
  absl::Status Synchronize() override {
    Waited();
    return CpuBackend::Synchronize();
  }
  int rewritten_before_a_wait = 0;
  int copies_from_staging = 0;

 private:
  void CountRewritten() {  // each rewritten copy once
    const size_t before = pending_.size();
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                  [](const auto& copy) {
                                    return std::memcmp(copy.first, copy.second.data(),
                                                       copy.second.size()) != 0;
                                  }),
                   pending_.end());
    rewritten_before_a_wait += static_cast<int>(before - pending_.size());
    copies_from_staging += static_cast<int>(before - pending_.size());
  }
  void Waited() {
    CountRewritten();
    copies_from_staging += static_cast<int>(pending_.size());
    pending_.clear();
  }
  std::vector<std::pair<char*, size_t>> staging_;
  std::vector<std::pair<const char*, std::vector<char>>> pending_;
};

TEST(StepGraphsWarmUpTest, NoStagingIsRewrittenBeforeItsCopyIsWaitedFor) {
  StagingContractCpuBackend backend;
  auto model = BloomModel::Load(FixturePath("models/bloom-tiny-h4"), &backend, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->EnableStepGraphs(StepGraphOptions{8, 24}).ok());
  auto cache = (*model)->CreateKvCache(16, kBlockSize);
  ASSERT_TRUE(cache.ok()) << cache.status();
  // Buckets 1, 2, 4 and 8 share one staging buffer, each with its own layout.
  ASSERT_TRUE((*model)->WarmUpStepGraphs(**cache).ok());
  EXPECT_EQ((*model)->step_graph_stats().captured, 4);
  // Then steps as the engine runs them: a prefill, and decode steps that replay the graphs.
  const std::vector<int32_t> table = {0, 1, 2, 3};
  std::vector<float> logits((*model)->vocab_size());
  StepBatch prefill;
  prefill.max_blocks_per_seq = 4;
  prefill.AddSequence({1, 17, 250}, 0, table, true);
  ASSERT_TRUE((*model)->Forward(prefill, **cache, logits.data()).ok());
  for (int32_t pos = 3; pos < 6; ++pos) {
    StepBatch decode;
    decode.max_blocks_per_seq = 4;
    decode.AddSequence({42}, pos, table, true);
    ASSERT_TRUE((*model)->Forward(decode, **cache, logits.data()).ok());
  }
  EXPECT_EQ((*model)->step_graph_stats().replayed, 3);
  EXPECT_GE(backend.copies_from_staging, 4 + 1 + 3) << "every bucket and step copies from staging";
  EXPECT_EQ(backend.rewritten_before_a_wait, 0);
}

// Prefill chunks that want no logits (a long prompt's first chunks), asked with a host buffer:
// each step waits for the device before the next one packs its metadata into the same staging
// (the forward once returned early there, and a GPU would have run the earlier chunk on the
// later one's ids and slots).
TEST(StepGraphsWarmUpTest, StepsWithoutLogitRowsWaitBeforeTheStagingIsReused) {
  StagingContractCpuBackend backend;
  auto model = BloomModel::Load(FixturePath("models/bloom-tiny-h4"), &backend, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  auto cache = (*model)->CreateKvCache(16, kBlockSize);
  ASSERT_TRUE(cache.ok()) << cache.status();
  const std::vector<int32_t> table = {0, 1, 2, 3};
  std::vector<float> logits((*model)->vocab_size());
  const std::vector<std::vector<int32_t>> chunks = {{1, 17, 250}, {30, 31, 32}, {40, 41}};
  int32_t computed = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    StepBatch chunk;
    chunk.max_blocks_per_seq = 4;
    chunk.AddSequence(chunks[c], computed, table, /*want_logits=*/c + 1 == chunks.size());
    ASSERT_TRUE((*model)->Forward(chunk, **cache, logits.data()).ok()) << "chunk " << c;
    computed += static_cast<int32_t>(chunks[c].size());
  }
  EXPECT_GE(backend.copies_from_staging, 3);
  EXPECT_EQ(backend.rewritten_before_a_wait, 0);
}

TEST(StepGraphsOptionsTest, RefusesOptionsOutOfRange) {
  CpuBackend backend(1);
  auto model = BloomModel::Load(FixturePath("models/bloom-tiny-h4"), &backend, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  for (StepGraphOptions bad :
       {StepGraphOptions{0, 2048}, StepGraphOptions{5000, 2048}, StepGraphOptions{8, 0}}) {
    EXPECT_EQ((*model)->EnableStepGraphs(bad).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_FALSE((*model)->step_graphs_enabled());
  EXPECT_TRUE((*model)->EnableStepGraphs(StepGraphOptions{}).ok());
  EXPECT_TRUE((*model)->step_graphs_enabled());
}

}  // namespace
}  // namespace blossom
