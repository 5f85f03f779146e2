#include "engine/generate/batch_generator.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "engine/speculative/draft_rounds.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

BatchGenerator::BatchGenerator(ModelRunner* runner, const Tokenizer* tokenizer,
                               BatchGeneratorOptions options)
    : runner_(runner), tokenizer_(tokenizer), options_(options) {}

absl::Status BatchGenerator::StepAndSample(
    const StepBatch& batch, std::vector<int32_t> sampled, std::vector<int64_t> rows,
    const std::vector<std::vector<int32_t>>& drafts,
    std::vector<std::unique_ptr<SequenceOutput>>& seqs,
    const std::function<void(int32_t, const TokenEvent&)>& deliver,
    std::vector<int32_t>* accepted) {
  if (sampler_ == nullptr) {
    if (options_.device_sampling) {
      BLOSSOM_ASSIGN_OR_RETURN(sampler_, runner_->MakeBatchSampler());
    } else {
      sampler_ = std::make_unique<HostBatchSampler>();
    }
  }
  Tensor logits;
  if (options_.device_sampling) {
    BLOSSOM_ASSIGN_OR_RETURN(logits, runner_->ForwardKeepLogits(batch));
  } else {
    const int64_t vocab = runner_->vocab_size();
    const int64_t num_rows = std::max<int64_t>(1, batch.logit_rows.size());
    host_logits_.resize(static_cast<size_t>(num_rows * vocab));
    BLOSSOM_RETURN_IF_ERROR(runner_->Forward(batch, host_logits_.data()));
    logits = Tensor(host_logits_.data(), DType::kF32, {num_rows, vocab});
  }
  accepted->assign(sampled.size(), 0);
  std::vector<size_t> entries(sampled.size());  // index into sampled, rows, drafts, *accepted
  std::vector<SampleRow> first_rows;
  for (size_t i = 0; i < sampled.size(); ++i) {
    entries[i] = i;
    BLOSSOM_ASSIGN_OR_RETURN(SampleRow row, seqs[sampled[i]]->PrepareSample(rows[i]));
    first_rows.push_back(row);
  }
  return SampleInRounds(
      *sampler_, logits, std::move(entries), std::move(first_rows),
      [&](size_t i, size_t round, const SampleRow& row,
          absl::StatusOr<SampleResult> sample) -> absl::StatusOr<absl::optional<SampleRow>> {
        if (!sample.ok()) return sample.status();
        SequenceOutput& seq = *seqs[sampled[i]];
        BLOSSOM_ASSIGN_OR_RETURN(TokenEvent event, seq.Accept(std::move(*sample)));
        const bool verified =
            !drafts.empty() && DraftVerified(drafts[i], round, event.token, event.finished);
        deliver(sampled[i], event);
        if (!verified) return absl::nullopt;
        ++(*accepted)[i];
        BLOSSOM_ASSIGN_OR_RETURN(SampleRow next, seq.PrepareSample(row.logit_row + 1));
        return next;
      });
}

absl::StatusOr<std::vector<GenerateResult>> BatchGenerator::Generate(
    const std::vector<GenerateRequest>& requests, GenerateStats* stats,
    const TokenCallback& on_token) {
  GenerateStats local_stats;
  if (stats == nullptr) stats = &local_stats;
  *stats = GenerateStats();
  const int64_t vocab = runner_->vocab_size();
  const int32_t bs = options_.block_size;
  const int32_t n = static_cast<int32_t>(requests.size());
  if (n == 0) return std::vector<GenerateResult>();

  // Validate everything before any work, naming the request.
  int32_t max_blocks = 1;
  for (int32_t i = 0; i < n; ++i) {
    const GenerateRequest& r = requests[i];
    if (r.prompt.empty())
      return absl::InvalidArgumentError(absl::StrCat("request ", i, ": the prompt is empty"));
    absl::Status s = Validate(r.sampling, static_cast<int32_t>(vocab));
    if (s.ok()) s = Validate(r.stopping, static_cast<int32_t>(vocab));
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("request ", i, ": ", s.message()));
    const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.stopping.max_new_tokens;
    max_blocks = std::max<int32_t>(max_blocks, static_cast<int32_t>((total + bs - 1) / bs));
  }
  const int32_t needed_blocks = max_blocks * n;
  if (cache_blocks_ < needed_blocks) {
    cache_blocks_ = 0;
    BLOSSOM_RETURN_IF_ERROR(runner_->AllocateKvCache(needed_blocks, bs));
    cache_blocks_ = needed_blocks;
  }
  auto table_of = [&](int32_t i) {
    std::vector<int32_t> table(max_blocks);
    for (int32_t b = 0; b < max_blocks; ++b) table[b] = i * max_blocks + b;
    return table;
  };

  std::vector<std::unique_ptr<SequenceOutput>> seqs;
  std::vector<GenerateResult> results(n);
  for (int32_t i = 0; i < n; ++i) {
    seqs.push_back(std::make_unique<SequenceOutput>(tokenizer_, requests[i].prompt,
                                                    requests[i].sampling, requests[i].stopping,
                                                    runner_->config().eos_token_ids));
    stats->prompt_tokens += requests[i].prompt.size();
  }
  auto deliver = [&](int32_t i, const TokenEvent& event) {
    GenerateResult& r = results[i];
    r.tokens.push_back(event.token);
    if (requests[i].sampling.logprobs >= 0) r.logprobs.push_back(event.logprob);
    if (event.finished) r.finish_reason = event.finish_reason;
    ++stats->generated_tokens;
    if (on_token) on_token(i, event);
  };

  StepBatch batch;
  batch.max_blocks_per_seq = max_blocks;
  std::vector<int32_t> accepted;  // per sampled sequence of a step: its drafts kept

  // Prefill in chunks; the last chunk of each prompt yields its first token's logits.
  const auto prefill_start = std::chrono::steady_clock::now();
  std::vector<int32_t> prefilled(n, 0);
  int32_t next_seq = 0;
  while (next_seq < n) {
    batch.Clear();
    std::vector<int32_t> sampled_seqs;
    int32_t budget = options_.max_step_tokens;
    while (next_seq < n && budget > 0) {
      const auto& prompt = requests[next_seq].prompt;
      const int32_t start = prefilled[next_seq];
      const int32_t take = std::min<int32_t>(budget, static_cast<int32_t>(prompt.size()) - start);
      const bool last_chunk = start + take == static_cast<int32_t>(prompt.size());
      batch.AddSequence(absl::MakeConstSpan(prompt.data() + start, take), start,
                        table_of(next_seq), last_chunk);
      if (last_chunk) sampled_seqs.push_back(next_seq);
      prefilled[next_seq] += take;
      budget -= take;
      if (last_chunk) ++next_seq;
    }
    std::vector<int64_t> rows(sampled_seqs.size());
    for (size_t r = 0; r < rows.size(); ++r) rows[r] = static_cast<int64_t>(r);
    BLOSSOM_RETURN_IF_ERROR(StepAndSample(batch, sampled_seqs, rows, {}, seqs, deliver, &accepted));
  }
  stats->prefill_seconds = SecondsSince(prefill_start);

  // Decode: one token for every unfinished sequence per step, plus its verified drafts.
  const auto decode_start = std::chrono::steady_clock::now();
  std::vector<int32_t> active, context, chunk;
  std::vector<int64_t> rows;
  std::vector<std::vector<int32_t>> drafts;
  std::vector<DraftLength> draft_length(static_cast<size_t>(n),
                                        DraftLength(options_.speculative.num_speculative_tokens));
  while (true) {
    batch.Clear();
    active.clear();
    for (int32_t i = 0; i < n; ++i) {
      if (!seqs[i]->finished()) active.push_back(i);
    }
    if (active.empty()) break;
    const bool speculate = options_.speculative.num_speculative_tokens > 0 &&
                           static_cast<int32_t>(active.size()) <= options_.speculative_max_running;
    rows.clear();
    drafts.assign(active.size(), {});
    for (size_t a = 0; a < active.size(); ++a) {
      const int32_t i = active[a];
      const std::vector<int32_t>& outputs = seqs[i]->output_tokens();
      const int32_t pos = static_cast<int32_t>(requests[i].prompt.size() + outputs.size()) - 1;
      // Every draft and the token after the drafts must fit max_new_tokens (and the KV table).
      const int32_t max_draft =
          requests[i].stopping.max_new_tokens - static_cast<int32_t>(outputs.size()) - 1;
      if (speculate && max_draft > 0) {
        context.assign(requests[i].prompt.begin(), requests[i].prompt.end());
        context.insert(context.end(), outputs.begin(), outputs.end());
        drafts[a] = ProposeNgramDraft(options_.speculative, context,
                                      std::min(max_draft, draft_length[i].tokens()));
      }
      chunk.assign(1, outputs.back());
      chunk.insert(chunk.end(), drafts[a].begin(), drafts[a].end());
      rows.push_back(static_cast<int64_t>(batch.logit_rows.size()));
      batch.AddSequence(chunk, pos, table_of(i), true, /*all_logits=*/!drafts[a].empty());
      stats->draft_tokens += static_cast<int64_t>(drafts[a].size());
    }
    const auto step_start = std::chrono::steady_clock::now();
    BLOSSOM_RETURN_IF_ERROR(
        StepAndSample(batch, active, rows, drafts, seqs, deliver, &accepted));
    stats->decode_step_seconds.push_back(SecondsSince(step_start));
    for (size_t a = 0; a < active.size(); ++a) {
      stats->accepted_draft_tokens += accepted[a];
      draft_length[active[a]].Observe(static_cast<int32_t>(drafts[a].size()), accepted[a]);
    }
  }
  stats->decode_seconds = SecondsSince(decode_start);
  for (int32_t i = 0; i < n; ++i) {
    results[i].text = seqs[i]->text();
    results[i].seed = seqs[i]->seed();
  }
  return results;
}

}  // namespace blossom
