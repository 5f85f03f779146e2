// model-parity-dump: runs a checkpoint on one backend over fixed token-id prompts and writes
// every prompt's logits (all positions), its greedy continuation and the logits each greedy
// token was chosen from, for benchmarks/gpu/model_parity.py to compare with Hugging Face
// transformers (fp32 and fp64) on the same machine.
//
//   model-parity-dump --model DIR --prompts ids.json --out DIR [--backend cpu|cuda]
//       [--upcast] [--new-tokens 16] [--threads 0]
//
// ids.json is a JSON list of token-id lists. The output folder gets index.json (backend, the
// activation dtype, and per prompt its ids, greedy tokens and file names with shapes) and raw
// little-endian float32 files: p<i>_logits.f32 [len, vocab] and p<i>_steps.f32 [new_tokens,
// vocab]. Exit status 1 with a message on any error.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/model/bloom_model.h"
#include "engine/model/forward_driver.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/cli/dashed_flags.h"
#ifdef BLOSSOM_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

ABSL_FLAG(std::string, model, "", "Checkpoint directory (config.json, *.safetensors).");
ABSL_FLAG(std::string, prompts, "", "JSON file: a list of token-id lists.");
ABSL_FLAG(std::string, out, "", "Output directory (created).");
ABSL_FLAG(std::string, backend, "cpu", "cpu or cuda (CUDA builds).");
ABSL_FLAG(bool, upcast, false, "cuda: import 16-bit weights as fp32 (an fp32 forward).");
ABSL_FLAG(int32_t, new_tokens, 16, "Greedy tokens per prompt.");
ABSL_FLAG(int32_t, threads, 0, "CPU threads (0 = all cores).");

namespace blossom {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend() {
  const std::string backend = absl::GetFlag(FLAGS_backend);
  if (backend == "cpu") {
    int threads = absl::GetFlag(FLAGS_threads);
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(threads));
  }
  if (backend == "cuda") {
#ifdef BLOSSOM_HAVE_CUDA
    CudaBackend::Options options;
    options.upcast_weights_to_f32 = absl::GetFlag(FLAGS_upcast);
    BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> cuda, CudaBackend::Create(options));
    return std::unique_ptr<Backend>(std::move(cuda));
#else
    return absl::FailedPreconditionError("this build has no CUDA backend");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat("--backend must be cpu or cuda, not '", backend, "'"));
}

absl::Status WriteFloats(const std::string& path, const float* data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * sizeof(float)));
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status Run() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (absl::GetFlag(FLAGS_model).empty() || absl::GetFlag(FLAGS_prompts).empty() || out.empty()) {
    return absl::InvalidArgumentError("--model, --prompts and --out are required");
  }
  std::ifstream in(absl::GetFlag(FLAGS_prompts));
  const nlohmann::json prompts_json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (prompts_json.is_discarded() || !prompts_json.is_array() || prompts_json.empty()) {
    return absl::InvalidArgumentError("--prompts must hold a non-empty JSON list of token-id lists");
  }
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : prompts_json) {
    if (!p.is_array() || p.empty()) return absl::InvalidArgumentError("every prompt must be a non-empty id list");
    std::vector<int32_t> ids;
    for (const auto& id : p) {
      if (!id.is_number_integer()) return absl::InvalidArgumentError("token ids must be integers");
      ids.push_back(id.get<int32_t>());
    }
    prompts.push_back(std::move(ids));
  }
  const int new_tokens = absl::GetFlag(FLAGS_new_tokens);
  if (new_tokens < 1) return absl::InvalidArgumentError("--new-tokens must be at least 1");

  BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend());
  BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<BloomModel> model,
                           BloomModel::Load(absl::GetFlag(FLAGS_model), backend.get(), nullptr));
  const int64_t V = model->vocab_size();
  for (const auto& p : prompts) {
    for (int32_t id : p) {
      if (id < 0 || id >= V) return absl::InvalidArgumentError(absl::StrCat("token id ", id, " outside the vocabulary"));
    }
  }
  ForwardDriver driver(model.get(), /*block_size=*/16);
  BLOSSOM_ASSIGN_OR_RETURN(std::vector<std::vector<float>> logits, driver.Prefill(prompts));
  BLOSSOM_ASSIGN_OR_RETURN(GreedyResult greedy, driver.Greedy(prompts, new_tokens, /*keep_step_logits=*/true));

  std::error_code error;
  std::filesystem::create_directories(out, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", out, ": ", error.message()));
  nlohmann::json index;
  index["backend"] = absl::GetFlag(FLAGS_backend);
  index["backend_name"] = backend->name();
  index["upcast"] = absl::GetFlag(FLAGS_upcast);
  index["vocab"] = V;
  index["new_tokens"] = new_tokens;
  const size_t P = prompts.size();
  for (size_t i = 0; i < P; ++i) {
    const std::string logits_file = absl::StrCat("p", i, "_logits.f32");
    const std::string steps_file = absl::StrCat("p", i, "_steps.f32");
    BLOSSOM_RETURN_IF_ERROR(WriteFloats(out + "/" + logits_file, logits[i].data(), logits[i].size()));
    std::vector<float> steps;
    steps.reserve(static_cast<size_t>(new_tokens) * V);
    for (int s = 0; s < new_tokens; ++s) {
      const float* row = greedy.step_logits.data() + (static_cast<size_t>(s) * P + i) * V;
      steps.insert(steps.end(), row, row + V);
    }
    BLOSSOM_RETURN_IF_ERROR(WriteFloats(out + "/" + steps_file, steps.data(), steps.size()));
    index["prompts"].push_back({{"ids", prompts[i]},
                                {"greedy", greedy.tokens[i]},
                                {"logits_file", logits_file},
                                {"logits_shape", {static_cast<int64_t>(prompts[i].size()), V}},
                                {"steps_file", steps_file},
                                {"steps_shape", {new_tokens, V}}});
  }
  std::ofstream(out + "/index.json") << index.dump(1) << "\n";
  std::printf("wrote %zu prompts to %s\n", P, out.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace blossom

int main(int argc, char** argv) {
  blossom::NormalizeDashedFlags(argc, argv);
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = blossom::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "model-parity-dump: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
