#include "engine/model/forward_driver.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

namespace blossom {

std::vector<int32_t> ScatteredBlocks::TableFor(int32_t seq) const {
  std::vector<int32_t> table(blocks_per_seq);
  for (int32_t i = 0; i < blocks_per_seq; ++i) table[i] = num_seqs * blocks_per_seq - 1 - (i * num_seqs + seq);
  return table;
}

absl::StatusOr<std::vector<std::vector<float>>> ForwardDriver::Prefill(
    const std::vector<std::vector<int32_t>>& seqs, size_t chunk, KvCache* cache, const ScatteredBlocks& blocks) {
  const int64_t V = model_->vocab_size();
  std::vector<std::vector<float>> out(seqs.size());
  size_t max_len = 0;
  for (const auto& s : seqs) max_len = std::max(max_len, s.size());
  chunk = std::max<size_t>(chunk, 1);
  for (size_t begin = 0; begin < max_len; begin += chunk) {
    StepBatch batch;
    batch.max_blocks_per_seq = blocks.blocks_per_seq;
    std::vector<size_t> members;
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (begin >= seqs[s].size()) continue;
      const size_t end = std::min(seqs[s].size(), begin + chunk);
      const std::vector<int32_t> table = blocks.TableFor(static_cast<int32_t>(s));
      batch.AddSequence(absl::MakeConstSpan(seqs[s].data() + begin, end - begin), static_cast<int32_t>(begin),
                        table, true, /*all_logits=*/true);
      members.push_back(s);
    }
    std::vector<float> logits(batch.logit_rows.size() * V);
    BLOSSOM_RETURN_IF_ERROR(model_->Forward(batch, *cache, logits.data()));
    size_t row = 0;
    for (size_t s : members) {
      const size_t n = std::min(seqs[s].size(), begin + chunk) - begin;
      out[s].insert(out[s].end(), logits.begin() + row * V, logits.begin() + (row + n) * V);
      row += n;
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<float>>> ForwardDriver::Prefill(
    const std::vector<std::vector<int32_t>>& seqs) {
  size_t max_len = 0;
  for (const auto& s : seqs) max_len = std::max(max_len, s.size());
  const ScatteredBlocks blocks{static_cast<int32_t>(max_len / block_size_ + 1), static_cast<int32_t>(seqs.size())};
  BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, model_->CreateKvCache(blocks.total(), block_size_));
  return Prefill(seqs, max_len, cache.get(), blocks);
}

namespace {

// The greedy token of a logits row; a non-finite logit is an error (a parity run must not pass
// on NaN logits by picking token 0, as a comparison-based argmax would).
absl::StatusOr<int32_t> GreedyToken(const float* row, int64_t vocab, size_t sequence, int step) {
  int64_t best = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!std::isfinite(row[i])) {
      return absl::InternalError(absl::StrCat("non-finite logit ", row[i], " at token ", i,
                                              " of sequence ", sequence, ", step ", step));
    }
    if (row[i] > row[best]) best = i;  // strict: ties keep the lowest index
  }
  return static_cast<int32_t>(best);
}

}  // namespace

absl::StatusOr<GreedyResult> ForwardDriver::Greedy(const std::vector<std::vector<int32_t>>& prompts,
                                                   int new_tokens, bool keep_step_logits) {
  const int64_t V = model_->vocab_size();
  size_t max_len = 0;
  for (size_t s = 0; s < prompts.size(); ++s) {
    if (prompts[s].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("Greedy: prompt ", s, " is empty"));
    }
    max_len = std::max(max_len, prompts[s].size());
  }
  const ScatteredBlocks blocks{static_cast<int32_t>((max_len + new_tokens) / block_size_ + 1),
                              static_cast<int32_t>(prompts.size())};
  BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, model_->CreateKvCache(blocks.total(), block_size_));
  BLOSSOM_ASSIGN_OR_RETURN(std::vector<std::vector<float>> prefill,
                           Prefill(prompts, std::max<size_t>(max_len, 1), cache.get(), blocks));
  GreedyResult result;
  result.tokens.resize(prompts.size());
  std::vector<int32_t> next(prompts.size());
  for (size_t s = 0; s < prompts.size(); ++s) {
    const float* last = prefill[s].data() + (prompts[s].size() - 1) * V;
    BLOSSOM_ASSIGN_OR_RETURN(next[s], GreedyToken(last, V, s, 0));
    if (keep_step_logits) result.step_logits.insert(result.step_logits.end(), last, last + V);
  }
  std::vector<float> logits(prompts.size() * V);
  for (int step = 0; step < new_tokens; ++step) {
    for (size_t s = 0; s < prompts.size(); ++s) result.tokens[s].push_back(next[s]);
    if (step + 1 == new_tokens) break;
    StepBatch batch;
    batch.max_blocks_per_seq = blocks.blocks_per_seq;
    for (size_t s = 0; s < prompts.size(); ++s) {
      const std::vector<int32_t> table = blocks.TableFor(static_cast<int32_t>(s));
      batch.AddSequence({next[s]}, static_cast<int32_t>(prompts[s].size() + step), table, true);
    }
    BLOSSOM_RETURN_IF_ERROR(model_->Forward(batch, *cache, logits.data()));
    if (keep_step_logits) result.step_logits.insert(result.step_logits.end(), logits.begin(), logits.end());
    for (size_t s = 0; s < prompts.size(); ++s) {
      BLOSSOM_ASSIGN_OR_RETURN(next[s], GreedyToken(logits.data() + s * V, V, s, step + 1));
    }
  }
  return result;
}

}  // namespace blossom
