// quant-quality: what --quantize costs on one model, as one JSON line per mode on stdout.
//
//   quant-quality --model DIR --golden FILE [--quantize int8,int4] [--quantize-lm-head]
//                 [--threads 2]
//
// Runs the golden sequences (tests/fixtures/goldens/*/golden.json: every logits prompt, every
// greedy prompt with the oracle's continuation) teacher-forced through the model as stored and
// quantized, and prints top-1 agreement and the |logprob error| of each next token
// (engine/model/quant_quality.h).
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "engine/model/quant_quality.h"
#include "kernels/weight_quant.h"
#include "tools/cli/dashed_flags.h"

ABSL_FLAG(std::string, model, "", "Model directory.");
ABSL_FLAG(std::string, golden, "", "golden.json holding the sequences to run.");
ABSL_FLAG(std::vector<std::string>, quantize, std::vector<std::string>({"int8", "int4"}),
          "Modes to measure against the unquantized model, comma separated.");
ABSL_FLAG(bool, quantize_lm_head, false, "Quantize the LM head too.");
ABSL_FLAG(int32_t, threads, 2, "CPU threads.");

namespace blossom {
namespace {

int Fail(const absl::Status& status) {
  std::cerr << "quant-quality: error: " << status.message() << std::endl;
  return 1;
}

int Run() {
  const std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty() || absl::GetFlag(FLAGS_golden).empty()) {
    return Fail(absl::InvalidArgumentError("--model and --golden are required"));
  }
  absl::StatusOr<std::vector<std::vector<int32_t>>> sequences =
      LoadGoldenSequences(absl::GetFlag(FLAGS_golden));
  if (!sequences.ok()) return Fail(sequences.status());
  for (const std::string& name : absl::GetFlag(FLAGS_quantize)) {
    absl::StatusOr<WeightQuant> quant = ParseWeightQuant(name);
    if (!quant.ok()) return Fail(quant.status());
    absl::StatusOr<QuantQuality> q =
        MeasureQuantQuality(model, *sequences, *quant, absl::GetFlag(FLAGS_quantize_lm_head),
                            absl::GetFlag(FLAGS_threads));
    if (!q.ok()) return Fail(q.status());
    std::cout << absl::StrFormat(
                     "{\"model\": \"%s\", \"quantize\": \"%s\", \"lm_head\": %s, \"sequences\": %d, "
                     "\"positions\": %d, \"top1_agreement\": %.4f, "
                     "\"mean_abs_logprob_error\": %.5f, \"max_abs_logprob_error\": %.5f}",
                     model, WeightQuantName(*quant),
                     absl::GetFlag(FLAGS_quantize_lm_head) ? "true" : "false", sequences->size(), q->positions,
                     q->top1_agreement, q->mean_abs_logprob_error, q->max_abs_logprob_error)
              << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace blossom

int main(int argc, char** argv) {
  blossom::NormalizeDashedFlags(argc, argv);
  absl::ParseCommandLine(argc, argv);
  return blossom::Run();
}
