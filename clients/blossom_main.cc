// `blossom`: the command-line client.
//
//   blossom generate --model DIR --prompt TEXT [--max-new-tokens N] [--temperature T]
//                    [--top-k K] [--top-p P] [--seed S] [--stop STR,...] [--threads N]
//
// Runs the engine in-process on the CPU backend, streams the completion to stdout as it is
// generated, then prints timings (load, prefill, ms per token) to stderr. Errors are printed as
// one line naming the problem, with exit code 1 (2 for usage errors).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/generate/batch_generator.h"
#include "engine/model/bloom_model.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cpu/cpu_backend.h"

ABSL_FLAG(std::string, model, "", "Model directory (config.json, *.safetensors, tokenizer.json).");
ABSL_FLAG(std::string, prompt, "", "Prompt text.");
ABSL_FLAG(int32_t, max_new_tokens, 32, "Maximum number of tokens to generate.");
ABSL_FLAG(int32_t, min_new_tokens, 0, "Minimum number of tokens before EOS or a stop may end it.");
ABSL_FLAG(double, temperature, 0.0, "Sampling temperature; 0 = greedy (deterministic).");
ABSL_FLAG(int32_t, top_k, 0, "Keep the k most likely tokens (0 = off).");
ABSL_FLAG(double, top_p, 1.0, "Nucleus sampling mass in (0, 1] (1 = off).");
ABSL_FLAG(double, typical_p, 1.0, "Typical sampling mass in (0, 1] (1 = off).");
ABSL_FLAG(double, min_p, 0.0, "Drop tokens below min_p * p(most likely) (0 = off).");
ABSL_FLAG(double, repetition_penalty, 1.0, "HF repetition penalty (1 = off).");
ABSL_FLAG(int64_t, seed, -1, "Sampling seed (-1 = random; the seed used is printed).");
ABSL_FLAG(std::vector<std::string>, stop, {}, "Stop strings, comma separated.");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating after the end-of-sequence token.");
ABSL_FLAG(int32_t, threads, 0, "CPU threads (0 = all cores).");
ABSL_FLAG(bool, quiet, false, "Print only the completion (no timings).");

namespace blossom {
namespace {

int Fail(const absl::Status& status) {
  std::cerr << "blossom: error: " << status.message() << std::endl;
  return 1;
}

int RunGenerate() {
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  if (model_dir.empty()) return Fail(absl::InvalidArgumentError("--model is required"));
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  if (prompt.empty()) return Fail(absl::InvalidArgumentError("--prompt must not be empty"));

  CpuBackend backend(absl::GetFlag(FLAGS_threads));
  auto model = BloomModel::Load(model_dir, &backend, nullptr);
  if (!model.ok()) return Fail(model.status());
  auto tokenizer = Tokenizer::FromFile(model_dir + "/tokenizer.json");
  if (!tokenizer.ok()) return Fail(tokenizer.status());
  auto ids = (*tokenizer)->Encode(prompt);
  if (!ids.ok()) return Fail(ids.status());
  if (ids->empty()) return Fail(absl::InvalidArgumentError("the prompt encodes to no tokens"));

  GenerateRequest request;
  request.prompt = *ids;
  request.sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  request.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  request.sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  request.sampling.typical_p = static_cast<float>(absl::GetFlag(FLAGS_typical_p));
  request.sampling.min_p = static_cast<float>(absl::GetFlag(FLAGS_min_p));
  request.sampling.repetition_penalty = static_cast<float>(absl::GetFlag(FLAGS_repetition_penalty));
  if (absl::GetFlag(FLAGS_seed) >= 0) request.sampling.seed = absl::GetFlag(FLAGS_seed);
  request.stopping.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  request.stopping.min_new_tokens = absl::GetFlag(FLAGS_min_new_tokens);
  request.stopping.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  request.stopping.stop_strings = absl::GetFlag(FLAGS_stop);

  BatchGenerator generator(model->get(), tokenizer->get());
  GenerateStats stats;
  std::cout << prompt << std::flush;
  auto results = generator.Generate({request}, &stats, [](size_t, const TokenEvent& event) {
    std::cout << event.text_delta << std::flush;
  });
  std::cout << std::endl;
  if (!results.ok()) return Fail(results.status());
  if (!absl::GetFlag(FLAGS_quiet)) {
    const ModelInfo& info = (*model)->info();
    const double decode_ms = stats.decode_step_seconds.empty()
                                 ? 0.0
                                 : stats.decode_seconds * 1000.0 / stats.decode_step_seconds.size();
    const double total_ms = (stats.prefill_seconds + stats.decode_seconds) * 1000.0;
    std::cerr << absl::StrFormat(
        "[blossom] model %s (%s weights, backend %s): load %.3f s\n"
        "[blossom] prompt %d tokens, generated %d tokens, finish_reason %s, seed %d\n"
        "[blossom] prefill %.2f ms, decode %.2f ms per token, %.2f ms per token overall\n",
        info.model_dir, DTypeName(info.weight_dtype), info.backend, info.load_seconds,
        stats.prompt_tokens, stats.generated_tokens,
        FinishReasonName((*results)[0].finish_reason), (*results)[0].seed,
        stats.prefill_seconds * 1000.0, decode_ms,
        stats.generated_tokens > 0 ? total_ms / stats.generated_tokens : 0.0);
  }
  return 0;
}

}  // namespace
}  // namespace blossom

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "blossom generate --model DIR --prompt TEXT [--max_new_tokens N] [--temperature T] "
      "[--top_k K] [--top_p P] [--seed S] [--stop A,B]");
  // Accept the documented dashed spellings (--max-new-tokens) as well as absl's underscores.
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args) {
    if (a.rfind("--", 0) != 0) continue;
    size_t end = a.find('=');
    for (size_t i = 2; i < std::min(end, a.size()); ++i)
      if (a[i] == '-') a[i] = '_';
  }
  std::vector<char*> argv2;
  for (std::string& a : args) argv2.push_back(a.data());
  std::vector<char*> positional = absl::ParseCommandLine(static_cast<int>(argv2.size()), argv2.data());
  if (positional.size() < 2) {
    std::cerr << "usage: " << absl::ProgramUsageMessage() << std::endl;
    return 2;
  }
  const std::string command = positional[1];
  if (command == "generate") return blossom::RunGenerate();
  std::cerr << "blossom: unknown command '" << command << "' (expected: generate)" << std::endl;
  return 2;
}
