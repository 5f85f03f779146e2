#include "engine/model/tp_test_util.h"

#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace tp_test {

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    // A NaN would be dropped by std::max and pass every bound: report it as infinitely far.
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return worst;
}

std::vector<std::vector<float>> PrefillAll(ModelRunner& runner,
                                           const std::vector<std::vector<int32_t>>& prompts) {
  const int64_t V = runner.vocab_size();
  int32_t blocks_per_seq = 1;
  for (const auto& p : prompts)
    blocks_per_seq = std::max<int32_t>(blocks_per_seq, p.size() / kBlockSize + 1);
  const absl::Status allocated =
      runner.AllocateKvCache(blocks_per_seq * static_cast<int32_t>(prompts.size()), kBlockSize);
  EXPECT_TRUE(allocated.ok()) << allocated;
  StepBatch batch;
  batch.max_blocks_per_seq = blocks_per_seq;
  for (size_t s = 0; s < prompts.size(); ++s) {
    std::vector<int32_t> table(blocks_per_seq);
    for (int32_t b = 0; b < blocks_per_seq; ++b) table[b] = s * blocks_per_seq + b;
    batch.AddSequence(prompts[s], 0, table, true, /*all_logits=*/true);
  }
  std::vector<float> logits(batch.logit_rows.size() * V);
  absl::Status status = runner.Forward(batch, logits.data());
  EXPECT_TRUE(status.ok()) << status;
  std::vector<std::vector<float>> out;
  size_t row = 0;
  for (const auto& p : prompts) {
    out.emplace_back(logits.begin() + row * V, logits.begin() + (row + p.size()) * V);
    row += p.size();
  }
  return out;
}

std::vector<std::vector<int32_t>> GreedyAll(ModelRunner& runner,
                                            const std::vector<std::vector<int32_t>>& prompts,
                                            int new_tokens) {
  const int64_t V = runner.vocab_size();
  const int32_t n = static_cast<int32_t>(prompts.size());
  int32_t blocks_per_seq = 1;
  for (const auto& p : prompts)
    blocks_per_seq = std::max<int32_t>(blocks_per_seq, (p.size() + new_tokens) / kBlockSize + 1);
  const absl::Status allocated = runner.AllocateKvCache(blocks_per_seq * n, kBlockSize);
  EXPECT_TRUE(allocated.ok()) << allocated;
  auto table_of = [&](int32_t s) {
    std::vector<int32_t> table(blocks_per_seq);
    for (int32_t b = 0; b < blocks_per_seq; ++b) table[b] = s * blocks_per_seq + b;
    return table;
  };
  std::vector<std::vector<int32_t>> generated(n);
  StepBatch batch;
  batch.max_blocks_per_seq = blocks_per_seq;
  for (int32_t s = 0; s < n; ++s) batch.AddSequence(prompts[s], 0, table_of(s), true);
  std::vector<float> logits(n * V);
  for (int step = 0; step < new_tokens; ++step) {
    absl::Status status = runner.Forward(batch, logits.data());
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) return generated;
    batch.Clear();
    for (int32_t s = 0; s < n; ++s) {
      const float* row = logits.data() + s * V;
      const int32_t next = static_cast<int32_t>(std::max_element(row, row + V) - row);
      generated[s].push_back(next);
      batch.AddSequence({next}, prompts[s].size() + step, table_of(s), true);
    }
  }
  return generated;
}

std::vector<float> Golden::Tensor(const std::string& name) const {
  const TensorEntry* e = logits == nullptr ? nullptr : logits->Find(name);
  EXPECT_NE(e, nullptr) << name;
  if (e == nullptr) return {};
  auto view = logits->View(*e);
  EXPECT_TRUE(view.ok());
  if (!view.ok()) return {};
  const float* p = view->as<const float>();
  return std::vector<float>(p, p + view->numel());
}

Golden LoadGolden(const std::string& model) {
  Golden g;
  const std::string dir = FixturePath("goldens/" + model);
  g.json = nlohmann::json::parse(ReadFileOrEmpty(dir + "/golden.json"), nullptr, false);
  EXPECT_FALSE(g.json.is_discarded()) << "cannot read " << dir << "/golden.json";
  if (g.json.is_discarded()) return g;
  auto file = SafetensorsFile::Open(dir + "/golden.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  if (file.ok()) g.logits = std::move(*file);
  for (const auto& item : g.json["logits"]) {
    g.logit_prompts.push_back(item["input_ids"].get<std::vector<int32_t>>());
    g.logit_names.push_back(item["name"].get<std::string>());
  }
  for (const auto& item : g.json["greedy"]) {
    g.greedy_prompts.push_back(item["input_ids"].get<std::vector<int32_t>>());
    g.greedy_new_ids.push_back(item["new_ids"].get<std::vector<int32_t>>());
  }
  return g;
}

}  // namespace tp_test
}  // namespace blossom
