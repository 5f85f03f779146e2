#include "engine/model/step_plan.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace blossom {
namespace {

void AppendWords(std::string* out, const int32_t* words, size_t n) {
  out->append(reinterpret_cast<const char*>(words), n * sizeof(int32_t));
}

}  // namespace

std::string EncodePlan(PlanKind kind, std::initializer_list<int32_t> args) {
  std::string out;
  const int32_t k = static_cast<int32_t>(kind);
  AppendWords(&out, &k, 1);
  for (int32_t a : args) AppendWords(&out, &a, 1);
  return out;
}

std::string EncodeForward(const StepBatch& batch) {
  const std::vector<int32_t>* parts[] = {&batch.token_ids, &batch.query_start, &batch.context_len,
                                         &batch.block_tables, &batch.logit_rows};
  std::string out = EncodePlan(PlanKind::kForward, {batch.max_blocks_per_seq});
  for (const auto* v : parts) {
    const int32_t n = static_cast<int32_t>(v->size());
    AppendWords(&out, &n, 1);
  }
  for (const auto* v : parts) AppendWords(&out, v->data(), v->size());
  return out;
}

absl::StatusOr<std::vector<int32_t>> PlanWords(const std::string& bytes) {
  if (bytes.empty() || bytes.size() % sizeof(int32_t) != 0) {
    return absl::InternalError(absl::StrCat("malformed step plan of ", bytes.size(), " bytes"));
  }
  std::vector<int32_t> words(bytes.size() / sizeof(int32_t));
  std::memcpy(words.data(), bytes.data(), bytes.size());
  return words;
}

absl::StatusOr<StepBatch> DecodeForward(const std::vector<int32_t>& words) {
  constexpr size_t kHeader = 7;  // kind, max_blocks_per_seq, five sizes
  if (words.size() < kHeader) return absl::InternalError("truncated forward plan");
  StepBatch batch;
  batch.max_blocks_per_seq = words[1];
  std::vector<int32_t>* parts[] = {&batch.token_ids, &batch.query_start, &batch.context_len,
                                   &batch.block_tables, &batch.logit_rows};
  size_t at = kHeader;
  for (int i = 0; i < 5; ++i) {
    const int64_t n = words[2 + i];
    if (n < 0 || at + static_cast<size_t>(n) > words.size()) {
      return absl::InternalError("truncated forward plan");
    }
    parts[i]->assign(words.begin() + at, words.begin() + at + n);
    at += static_cast<size_t>(n);
  }
  if (at != words.size()) return absl::InternalError("forward plan has trailing words");
  return batch;
}

}  // namespace blossom
