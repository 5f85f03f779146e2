#include "engine/model/quant_quality.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/model/bloom_model.h"
#include "engine/model/forward_driver.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/status_macros.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace {

constexpr int32_t kBlockSize = 16;

// Every position's logits of every sequence ([len, vocab] each).
absl::StatusOr<std::vector<std::vector<float>>> AllLogits(
    const std::string& model_dir, const std::vector<std::vector<int32_t>>& sequences,
    WeightQuant quant, bool quantize_lm_head, int threads) {
  CpuBackend backend(threads);
  ModelLoadOptions options;
  options.prefetch = false;
  options.quantize = quant;
  options.quantize_lm_head = quantize_lm_head;
  BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<BloomModel> model,
                           BloomModel::Load(model_dir, &backend, nullptr, options));
  return ForwardDriver(model.get(), kBlockSize).Prefill(sequences);
}

// log_softmax(row)[index], in double.
double LogProb(const float* row, int64_t vocab, int64_t index) {
  const float top = *std::max_element(row, row + vocab);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - top);
  return static_cast<double>(row[index]) - top - std::log(sum);
}

}  // namespace

absl::StatusOr<QuantQuality> MeasureQuantQuality(const std::string& model_dir,
                                                 const std::vector<std::vector<int32_t>>& sequences,
                                                 WeightQuant quant, bool quantize_lm_head,
                                                 int threads) {
  for (const std::vector<int32_t>& seq : sequences) {
    if (seq.size() < 2) return absl::InvalidArgumentError("every sequence needs at least 2 tokens");
  }
  BLOSSOM_ASSIGN_OR_RETURN(std::vector<std::vector<float>> reference,
                           AllLogits(model_dir, sequences, WeightQuant::kNone, false, threads));
  BLOSSOM_ASSIGN_OR_RETURN(std::vector<std::vector<float>> quantized,
                           AllLogits(model_dir, sequences, quant, quantize_lm_head, threads));
  QuantQuality q;
  int64_t agree = 0;
  double error_sum = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const std::vector<int32_t>& seq = sequences[s];
    const int64_t vocab = static_cast<int64_t>(reference[s].size() / seq.size());
    for (size_t t = 0; t + 1 < seq.size(); ++t) {
      const float* ref = reference[s].data() + t * vocab;
      const float* quant_row = quantized[s].data() + t * vocab;
      agree += std::max_element(ref, ref + vocab) - ref ==
               std::max_element(quant_row, quant_row + vocab) - quant_row;
      const double error =
          std::fabs(LogProb(quant_row, vocab, seq[t + 1]) - LogProb(ref, vocab, seq[t + 1]));
      error_sum += error;
      q.max_abs_logprob_error = std::max(q.max_abs_logprob_error, error);
      ++q.positions;
    }
  }
  if (q.positions > 0) {
    q.top1_agreement = static_cast<double>(agree) / q.positions;
    q.mean_abs_logprob_error = error_sum / q.positions;
  }
  return q;
}

absl::StatusOr<std::vector<std::vector<int32_t>>> LoadGoldenSequences(const std::string& golden_json) {
  std::ifstream in(golden_json);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", golden_json));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json golden = nlohmann::json::parse(text.str(), nullptr, false);
  if (golden.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(golden_json, ": not JSON"));
  std::vector<std::vector<int32_t>> sequences;
  try {
    if (golden.contains("logits")) {
      for (const auto& item : golden["logits"])
        sequences.push_back(item["input_ids"].get<std::vector<int32_t>>());
    }
    if (golden.contains("greedy")) {
      for (const auto& item : golden["greedy"]) {
        std::vector<int32_t> seq = item["input_ids"].get<std::vector<int32_t>>();
        for (int32_t id : item["new_ids"].get<std::vector<int32_t>>()) seq.push_back(id);
        sequences.push_back(std::move(seq));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(golden_json, ": ", e.what()));
  }
  sequences.erase(std::remove_if(sequences.begin(), sequences.end(),
                                 [](const std::vector<int32_t>& s) { return s.size() < 2; }),
                  sequences.end());
  if (sequences.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(golden_json, ": no sequence of 2+ tokens"));
  }
  return sequences;
}

}  // namespace blossom
