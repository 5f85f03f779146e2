#include "engine/speculative/draft_rounds.h"

#include <chrono>
#include <utility>

namespace blossom {

bool DraftVerified(absl::Span<const int32_t> draft, size_t round, int32_t token, bool finished) {
  return !finished && round < draft.size() && token == draft[round];
}

absl::Status SampleInRounds(BatchSampler& sampler, const Tensor& logits,
                            std::vector<size_t> entries, std::vector<SampleRow> rows,
                            RoundDecision decide, double* sample_seconds) {
  std::vector<absl::StatusOr<SampleResult>> samples;
  std::vector<size_t> next_entries;
  std::vector<SampleRow> next_rows;
  for (size_t round = 0; !rows.empty(); ++round) {
    const auto start = std::chrono::steady_clock::now();
    const absl::Status sampled = sampler.SampleBatch(logits, rows, &samples);
    if (sample_seconds != nullptr) {
      *sample_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    next_entries.clear();
    next_rows.clear();
    for (size_t j = 0; j < rows.size(); ++j) {
      absl::StatusOr<SampleResult> sample =
          sampled.ok() ? std::move(samples[j]) : absl::StatusOr<SampleResult>(sampled);
      absl::StatusOr<absl::optional<SampleRow>> next =
          decide(entries[j], round, rows[j], std::move(sample));
      if (!next.ok()) return next.status();
      if (next->has_value()) {
        next_entries.push_back(entries[j]);
        next_rows.push_back(**next);
      }
    }
    std::swap(entries, next_entries);
    std::swap(rows, next_rows);
  }
  return absl::OkStatus();
}

}  // namespace blossom
