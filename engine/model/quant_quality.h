// Measures what --quantize costs in quality: the same sequences run teacher-forced through the
// model with its checkpoint weights (the fp32 reference: the CPU backend computes in fp32) and
// with quantized Linear weights, compared position by position.
//
// Per position t of a sequence (every position that has a next token):
// - top-1 agreement: argmax of the quantized logits == argmax of the reference logits;
// - logprob error: |log_softmax(quantized)[next] - log_softmax(reference)[next]|, where next is
//   the sequence's token t + 1 (the token teacher forcing chose).
//
// Thread-safety: free functions; each call loads its own models.
#ifndef BLOSSOM_ENGINE_MODEL_QUANT_QUALITY_H_
#define BLOSSOM_ENGINE_MODEL_QUANT_QUALITY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/weight_quant.h"

namespace blossom {

struct QuantQuality {
  int64_t positions = 0;
  double top1_agreement = 0;        // share of positions, in [0, 1]
  double mean_abs_logprob_error = 0;
  double max_abs_logprob_error = 0;
};

// Runs `sequences` (each at least 2 tokens) through the model in `model_dir` twice on a CPU
// backend with `threads` threads: as stored, and quantized with `quant` (the LM head too if
// quantize_lm_head).
absl::StatusOr<QuantQuality> MeasureQuantQuality(const std::string& model_dir,
                                                 const std::vector<std::vector<int32_t>>& sequences,
                                                 WeightQuant quant, bool quantize_lm_head,
                                                 int threads);

// The token sequences of a golden.json (tests/fixtures/goldens/*): every "logits" prompt, and every
// "greedy" prompt followed by the oracle's greedy continuation.
absl::StatusOr<std::vector<std::vector<int32_t>>> LoadGoldenSequences(const std::string& golden_json);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_QUANT_QUALITY_H_
