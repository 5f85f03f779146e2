// `blossom`: the command-line client.
//
//   blossom generate --model DIR TEXT [--max-new-tokens N] [--temperature T]
//                    [--top-k K] [--top-p P] [--seed S] [--stop STR,...] [--threads N] [--tp N]
//                    [--launcher mpi]   (under `mpirun -np N`, with --tp N)
//
// Runs the engine in-process on the CPU backend, streams the completion to stdout as it is
// generated, then prints timings (load, prefill, ms per token) to stderr.
//
// Server mode (against a running blossom-server):
//   blossom generate|stream --server HOST:PORT TEXT [sampling flags as above]
//   blossom generate ... --num_beams N [--num_return_sequences K] [--length_penalty L]
//                    [--early_stopping false|true|never] [--show_token_ids]
//                    (beam search, local or --server; these four flags need --num_beams)
//   blossom tokenize --server HOST:PORT TEXT
//   blossom health|info --server HOST:PORT
//   common: [--api_key_file FILE | --api_key KEY] [--timeout SECONDS]
//           [--tls [--tls_ca FILE] [--tls_cert PEM --tls_key PEM]]
//   (without either key flag, the key is $BLOSSOM_API_KEY if set; --api_key shows in `ps`)
//
// TEXT is one argument, as blossom-client takes it (quote several words; put `--` before a text
// that starts with a dash), or --prompt TEXT instead; an extra argument is refused, not dropped.
// Errors are printed as one line naming the problem, with exit code 1 (2 for usage errors).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/types/span.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/generate/batch_generator.h"
#include "engine/serving/beam_search.h"
#include "engine/serving/engine.h"
#include "engine/guided/constraint_cache.h"
#include "engine/guided/token_vocabulary.h"
#include "engine/speculative/speculative_flags.h"
#include "engine/model/lora_flags.h"
#include "engine/model/model_runner.h"
#include "clients/remote_commands.h"
#include "tools/cli/dashed_flags.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/dtype.h"
#include "kernels/weight_quant.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, model, "", "Model directory (config.json, *.safetensors, tokenizer.json).");
ABSL_FLAG(std::string, prompt, "",
          "Prompt text (generate, stream) or text (tokenize); or give it as the argument after "
          "the command.");
ABSL_FLAG(int32_t, max_new_tokens, 32, "Maximum number of tokens to generate.");
ABSL_FLAG(int32_t, min_new_tokens, 0, "Minimum number of tokens before EOS or a stop may end it.");
ABSL_FLAG(double, temperature, 0.0, "Sampling temperature; 0 = greedy (deterministic).");
ABSL_FLAG(int32_t, top_k, 0, "Keep the k most likely tokens (0 = off).");
ABSL_FLAG(double, top_p, 1.0, "Nucleus sampling mass in (0, 1] (1 = off).");
ABSL_FLAG(double, typical_p, 1.0, "Typical sampling mass in (0, 1] (1 = off).");
ABSL_FLAG(double, min_p, 0.0, "Drop tokens below min_p * p(most likely) (0 = off).");
ABSL_FLAG(double, repetition_penalty, 1.0, "HF repetition penalty (1 = off).");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt,
          "Sampling seed, 0 to 2^64-1 (absent = random; the seed used is printed, and replays the run).");
ABSL_FLAG(std::vector<std::string>, stop, {}, "Stop strings, comma separated.");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating after the end-of-sequence token.");
ABSL_FLAG(double, frequency_penalty, 0.0, "OpenAI frequency penalty in [-2, 2] (0 = off).");
ABSL_FLAG(double, presence_penalty, 0.0, "OpenAI presence penalty in [-2, 2] (0 = off).");
ABSL_FLAG(std::string, json_schema, "",
          "Structured output: a JSON Schema the completion follows (its text, or @FILE).");
ABSL_FLAG(bool, json_compact, false, "With --json_schema: no whitespace outside strings.");
ABSL_FLAG(std::string, regex, "", "Structured output: a regular expression the completion matches.");
ABSL_FLAG(std::string, grammar, "",
          "Structured output: a GBNF grammar whose root the completion is (its text, or @FILE).");
ABSL_FLAG(int32_t, num_beams, 0,
          "Beam search with this many beams (as transformers' generate(num_beams=N)); 0 = off.");
ABSL_FLAG(int32_t, num_return_sequences, 0, "With --num_beams: beams printed, best first (0 = all).");
ABSL_FLAG(double, length_penalty, 1.0,
          "With --num_beams: a finished beam scores sum(logprobs) / length ** length_penalty.");
ABSL_FLAG(std::string, early_stopping, "false",
          "With --num_beams: false (HF's heuristic), true (once N beams finished) or never.");
ABSL_FLAG(bool, show_token_ids, false,
          "With --num_beams: each beam's token ids on its '# beam' line.");
ABSL_FLAG(int32_t, threads, 0,
          "CPU threads (0 = the CPUs this process may use: its affinity mask, capped by a cgroup "
          "CPU limit).");
ABSL_FLAG(int32_t, tp, 1, "Tensor-parallel ranks (threads of one process on the CPU backend).");
ABSL_FLAG(std::string, launcher, "threads",
          "generate: threads (ranks are threads) or mpi (`mpirun -np <tp> blossom generate "
          "--launcher mpi ...`: a process per rank; rank 0 prints the completion).");
ABSL_FLAG(bool, strict_load, false,
          "Refuse a checkpoint holding tensors a BLOOM model does not use (default: log them).");
ABSL_FLAG(std::string, quantize, "none",
          "Weight quantization made at load time: none, int8 or int4 (group-wise, 32 weights per "
          "scale), or bf16 (bf16 weights times activations rounded to bf16; AVX512-BF16); the "
          "Linear weights only; cpu backend.");
ABSL_FLAG(std::string, kv_cache_dtype, "auto",
          "The KV cache's dtype: auto (the activation dtype) or bfloat16 beside the cpu backend's fp32 "
          "activations (half the memory per token; K and V rows rounded when written).");
ABSL_FLAG(bool, quantize_lm_head, false,
          "With --quantize: quantize the LM head too (a tied head gets its own packed copy).");
ABSL_FLAG(bool, quiet, false, "Print only the completion (no timings).");
ABSL_FLAG(std::string, server, "", "host:port of a blossom-server: run the command against it.");
ABSL_FLAG(std::string, api_key, "",
          "API key for --server (sent as a Bearer token). Visible to other local users (ps, "
          "/proc): prefer --api_key_file or the BLOSSOM_API_KEY environment variable.");
ABSL_FLAG(std::string, api_key_file, "",
          "File holding the API key for --server (surrounding whitespace trimmed; an empty "
          "file is an error). Without --api_key and --api_key_file, BLOSSOM_API_KEY is used.");
ABSL_FLAG(double, timeout, 0.0, "Deadline in seconds for --server calls (0 = none).");
ABSL_FLAG(bool, tls, false, "Use TLS for --server.");
ABSL_FLAG(std::string, tls_ca, "", "PEM root certificates for --tls (default: system roots).");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate chain for --tls, for a server that requires one (mutual TLS: "
          "blossom-server --tls_client_ca); with --tls_key.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");

namespace blossom {
namespace {

int Fail(const absl::Status& status) {
  std::cerr << "blossom: error: " << status.message() << std::endl;
  return 1;
}

// A text flag's value: the flag itself, or the file named after an '@'.
absl::StatusOr<std::string> TextOrFileFlag(absl::string_view name, const std::string& value) {
  if (value.empty() || value[0] != '@') return value;
  std::ifstream in(value.substr(1));
  if (!in) return absl::NotFoundError(absl::StrCat("--", name, ": cannot read ", value.substr(1)));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}
absl::StatusOr<std::string> JsonSchemaFlag() {
  return TextOrFileFlag("json_schema", absl::GetFlag(FLAGS_json_schema));
}
absl::StatusOr<std::string> GrammarFlag() {
  return TextOrFileFlag("grammar", absl::GetFlag(FLAGS_grammar));
}

// The structured-output constraint the flags ask for (null for none), as the server builds it.
absl::StatusOr<std::shared_ptr<const TokenConstraint>> ConstraintFlags(const Tokenizer& tokenizer) {
  absl::StatusOr<std::string> schema = JsonSchemaFlag();
  if (!schema.ok()) return schema.status();
  absl::StatusOr<std::string> grammar = GrammarFlag();
  if (!grammar.ok()) return grammar.status();
  const std::string regex = absl::GetFlag(FLAGS_regex);
  // As the server refuses sampling.json_compact without a schema: a flag that would be ignored.
  if (absl::GetFlag(FLAGS_json_compact) && schema->empty()) {
    return absl::InvalidArgumentError("--json_compact is set without --json_schema");
  }
  const int given = !schema->empty() + !regex.empty() + !grammar->empty();
  if (given == 0) return std::shared_ptr<const TokenConstraint>();
  if (given > 1) return absl::InvalidArgumentError("give one of --json_schema, --regex and --grammar");
  if (absl::GetFlag(FLAGS_ignore_eos) || absl::GetFlag(FLAGS_min_new_tokens) > 0) {
    return absl::InvalidArgumentError(
        "structured output ends with EOS: not with --ignore_eos or --min_new_tokens");
  }
  ConstraintCache cache([&tokenizer] { return TokenVocabulary::FromTokenizer(tokenizer); });
  JsonGrammarOptions options;
  options.allow_whitespace = !absl::GetFlag(FLAGS_json_compact);
  if (!grammar->empty()) return cache.Grammar(*grammar);
  return schema->empty() ? cache.Regex(regex) : cache.JsonSchema(*schema, options);
}

absl::StatusOr<v1::EarlyStopping> EarlyStoppingFlag() {
  const std::string value = absl::GetFlag(FLAGS_early_stopping);
  if (value == "false") return v1::EARLY_STOPPING_HEURISTIC;
  if (value == "true") return v1::EARLY_STOPPING_WHEN_FULL;
  if (value == "never") return v1::EARLY_STOPPING_NEVER;
  return absl::InvalidArgumentError(
      absl::StrCat("--early_stopping must be false, true or never, got '", value, "'"));
}

// The beam flags as the wire request (the server's, and the local search's source).
absl::StatusOr<v1::BeamSearchRequest> BeamSearchFlags(const std::string& prompt) {
  if (!absl::GetFlag(FLAGS_stop).empty()) {
    return absl::InvalidArgumentError(
        "--stop is not supported with --num_beams (a beam's score needs the token that ends it)");
  }
  // Beam search ranks the model's own log-probabilities: a sampling flag would be ignored.
  const std::pair<const char*, bool> ignored[] = {
      {"--temperature", absl::GetFlag(FLAGS_temperature) != 0.0},
      {"--top_k", absl::GetFlag(FLAGS_top_k) != 0},
      {"--top_p", absl::GetFlag(FLAGS_top_p) != 1.0},
      {"--typical_p", absl::GetFlag(FLAGS_typical_p) != 1.0},
      {"--min_p", absl::GetFlag(FLAGS_min_p) != 0.0},
      {"--repetition_penalty", absl::GetFlag(FLAGS_repetition_penalty) != 1.0},
      {"--frequency_penalty", absl::GetFlag(FLAGS_frequency_penalty) != 0.0},
      {"--presence_penalty", absl::GetFlag(FLAGS_presence_penalty) != 0.0},
      {"--seed", absl::GetFlag(FLAGS_seed).has_value()},
      {"--json_schema", !absl::GetFlag(FLAGS_json_schema).empty()},
      {"--regex", !absl::GetFlag(FLAGS_regex).empty()},
      {"--grammar", !absl::GetFlag(FLAGS_grammar).empty()},
  };
  for (const auto& [flag, set] : ignored) {
    if (set) return absl::InvalidArgumentError(absl::StrCat(flag, " is not supported with --num_beams"));
  }
  absl::StatusOr<v1::EarlyStopping> early = EarlyStoppingFlag();
  if (!early.ok()) return early.status();
  v1::BeamSearchRequest request;
  request.set_text(prompt);
  request.set_beam_width(absl::GetFlag(FLAGS_num_beams));
  if (absl::GetFlag(FLAGS_num_return_sequences) > 0) {
    request.set_num_return_sequences(absl::GetFlag(FLAGS_num_return_sequences));
  }
  request.set_length_penalty(absl::GetFlag(FLAGS_length_penalty));
  request.set_early_stopping(*early);
  request.mutable_stopping()->set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  request.mutable_stopping()->set_min_new_tokens(absl::GetFlag(FLAGS_min_new_tokens));
  request.mutable_stopping()->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  return request;
}

// generate --num_beams N without a server: an engine in this process runs the search.
int RunLocalBeamSearch(ModelRunner* runner, const Tokenizer& tokenizer, const std::string& text,
                       std::vector<int32_t> prompt) {
  absl::StatusOr<v1::BeamSearchRequest> flags = BeamSearchFlags(text);
  if (!flags.ok()) return Fail(flags.status());
  auto engine = Engine::Create(runner, &tokenizer, EngineConfig{});
  if (!engine.ok()) return Fail(engine.status());
  BeamSearchRequest request;
  request.prompt_tokens = std::move(prompt);
  BeamSearchParams& p = request.params;
  p.beam_width = flags->beam_width();
  p.num_return_sequences =
      flags->has_num_return_sequences() ? flags->num_return_sequences() : p.beam_width;
  p.length_penalty = flags->length_penalty();
  p.early_stopping = flags->early_stopping() == v1::EARLY_STOPPING_WHEN_FULL ? EarlyStopping::kWhenFull
                     : flags->early_stopping() == v1::EARLY_STOPPING_NEVER ? EarlyStopping::kNever
                                                                            : EarlyStopping::kHeuristic;
  p.max_new_tokens = flags->stopping().max_new_tokens();
  p.min_new_tokens = flags->stopping().min_new_tokens();
  if (!flags->stopping().ignore_eos()) {
    for (int32_t id : (*engine)->end_token_ids()) {
      // config.json's list may repeat an id; a search's end tokens must be distinct.
      if (std::find(p.end_tokens.begin(), p.end_tokens.end(), id) == p.end_tokens.end()) {
        p.end_tokens.push_back(id);
      }
    }
  }
  std::promise<BeamSearchOutcome> done;
  auto search = BeamSearch::Start(engine->get(), std::move(request),
                                  [&done](BeamSearchOutcome outcome) { done.set_value(outcome); });
  if (!search.ok()) return Fail(search.status());
  const BeamSearchOutcome outcome = done.get_future().get();
  if (!outcome.status.ok()) return Fail(outcome.status);
  v1::BeamSearchResponse response;
  for (const BeamHypothesis& beam : outcome.beams) {
    v1::Beam* b = response.add_beams();
    const size_t text_tokens = beam.tokens.size() - (beam.ended_by_end_token ? 1 : 0);
    b->set_text(tokenizer.Decode(absl::MakeConstSpan(beam.tokens.data(), text_tokens), true));
    for (int32_t id : beam.tokens) b->add_tokens()->set_id(id);
    b->set_score(beam.score);
    b->set_cumulative_logprob(beam.cumulative_logprob);
    // The model's end tokens are the only ones here, each an EOS.
    b->set_finish_reason(beam.ended_by_end_token ? v1::FINISH_REASON_EOS_TOKEN
                                                 : v1::FINISH_REASON_LENGTH);
  }
  PrintBeams(response, text, absl::GetFlag(FLAGS_show_token_ids), std::cout);
  if (!absl::GetFlag(FLAGS_quiet)) {
    std::cerr << absl::StrFormat(
        "[blossom] beam search: %d beams, prompt %d tokens, %d steps (%d tokens computed, %d "
        "from the prefix cache), %.1f ms\n",
        p.beam_width, outcome.prompt_tokens, outcome.rounds, outcome.computed_tokens,
        outcome.cached_tokens,
        1e3 * std::chrono::duration<double>(outcome.finished - outcome.arrival).count());
  }
  return 0;
}

// `prompt`: ResolveCommandLine's text (never empty).
int RunGenerate(const std::string& prompt) {
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  if (model_dir.empty()) {  // a usage error: exit 2, as the header says
    std::cerr << "blossom: error: --model DIR is required (or --server HOST:PORT)" << std::endl;
    return 2;
  }

  // Logs (load and memory reports, warnings) go to stderr: stdout carries only the completion.
  spdlog::set_default_logger(spdlog::stderr_color_mt("blossom"));
  ModelRunnerOptions runner_options;
  runner_options.model_dir = model_dir;
  runner_options.tensor_parallel_size = absl::GetFlag(FLAGS_tp);
  runner_options.launcher = absl::GetFlag(FLAGS_launcher);
  runner_options.strict_load = absl::GetFlag(FLAGS_strict_load);
  absl::StatusOr<WeightQuant> quantize = ParseWeightQuant(absl::GetFlag(FLAGS_quantize));
  if (!quantize.ok()) return Fail(quantize.status());
  runner_options.quantize = *quantize;
  runner_options.quantize_lm_head = absl::GetFlag(FLAGS_quantize_lm_head);
  absl::StatusOr<std::optional<DType>> kv_cache_dtype = ParseKvCacheDtype(absl::GetFlag(FLAGS_kv_cache_dtype));
  if (!kv_cache_dtype.ok()) return Fail(kv_cache_dtype.status());
  runner_options.kv_cache_dtype = *kv_cache_dtype;
  if (absl::Status lora = ApplyLoraAdapterFlag(&runner_options); !lora.ok()) return Fail(lora);
  BatchGeneratorOptions options;
  absl::StatusOr<NgramProposerConfig> speculative = NgramProposerConfigFromFlags();
  if (!speculative.ok()) return Fail(speculative.status());
  options.speculative = *speculative;
  if (absl::GetFlag(FLAGS_threads) < 0) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--threads must be >= 0 (0 = the CPUs this process may use), got ", absl::GetFlag(FLAGS_threads))));
  }
  if (absl::GetFlag(FLAGS_threads) > 0 && runner_options.tensor_parallel_size > 0) {
    runner_options.threads_per_rank =
        std::max(1, absl::GetFlag(FLAGS_threads) / runner_options.tensor_parallel_size);
  }
  auto model = ModelRunner::Create(runner_options);
  if (!model.ok()) return Fail(model.status());
  if (!(*model)->is_leader()) {
    // --launcher mpi, rank > 0: compute this rank's slice of rank 0's steps until it is done.
    const absl::Status served = (*model)->RunFollower();
    return served.ok() ? 0 : Fail(served);
  }
  auto tokenizer = Tokenizer::FromModelDir(model_dir, (*model)->vocab_size());
  if (!tokenizer.ok()) return Fail(tokenizer.status());
  auto ids = (*tokenizer)->Encode(prompt);
  if (!ids.ok()) return Fail(ids.status());
  if (ids->empty()) return Fail(absl::InvalidArgumentError("the prompt encodes to no tokens"));
  if (absl::GetFlag(FLAGS_num_beams) > 0) {
    return RunLocalBeamSearch(model->get(), **tokenizer, prompt, *std::move(ids));
  }

  GenerateRequest request;
  request.prompt = *ids;
  request.sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  request.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  request.sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  request.sampling.typical_p = static_cast<float>(absl::GetFlag(FLAGS_typical_p));
  request.sampling.min_p = static_cast<float>(absl::GetFlag(FLAGS_min_p));
  request.sampling.repetition_penalty = static_cast<float>(absl::GetFlag(FLAGS_repetition_penalty));
  request.sampling.frequency_penalty = static_cast<float>(absl::GetFlag(FLAGS_frequency_penalty));
  request.sampling.presence_penalty = static_cast<float>(absl::GetFlag(FLAGS_presence_penalty));
  if (const std::optional<uint64_t> seed = absl::GetFlag(FLAGS_seed)) request.sampling.seed = *seed;
  absl::StatusOr<std::shared_ptr<const TokenConstraint>> constraint = ConstraintFlags(**tokenizer);
  if (!constraint.ok()) return Fail(constraint.status());
  request.sampling.constraint = *std::move(constraint);
  request.stopping.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens);
  request.stopping.min_new_tokens = absl::GetFlag(FLAGS_min_new_tokens);
  request.stopping.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  request.stopping.stop_strings = absl::GetFlag(FLAGS_stop);

  BatchGenerator generator(model->get(), tokenizer->get(), options);
  GenerateStats stats;
  // The prompt, then the completion as it streams (llama.cpp's CLI prints the same; with
  // --server only the completion). The prompt goes out with the first token, or once the request
  // is done: a refused request leaves stdout empty.
  bool echoed = false;
  auto echo_prompt = [&] {
    if (!echoed) std::cout << prompt;
    echoed = true;
  };
  auto results = generator.Generate({request}, &stats, [&](size_t, const TokenEvent& event) {
    echo_prompt();
    std::cout << event.text_delta << std::flush;
  });
  if (results.ok()) echo_prompt();
  if (echoed) std::cout << std::endl;  // a request that failed mid-stream ends its line too
  if (!results.ok()) return Fail(results.status());
  if (!absl::GetFlag(FLAGS_quiet)) {
    const ModelInfo& info = (*model)->info();
    // Per token, not per step: with speculation a step may produce several. The first token
    // came from the prefill.
    const int64_t decode_tokens = stats.generated_tokens - 1;
    const double decode_ms =
        decode_tokens > 0 ? stats.decode_seconds * 1000.0 / decode_tokens : 0.0;
    const double total_ms = (stats.prefill_seconds + stats.decode_seconds) * 1000.0;
    std::cerr << absl::StrFormat(
        "[blossom] model %s%s (%s weights, quantize %s%s, KV cache %s, backend %s): load %.3f s\n"
        "[blossom] prompt %d tokens, generated %d tokens, finish_reason %s, seed %d\n"
        "[blossom] prefill %.2f ms, decode %.2f ms per token, %.2f ms per token overall\n",
        info.model_dir, info.lora_adapter.empty() ? std::string() : " + LoRA " + info.lora_adapter,
        DTypeName(info.weight_dtype), WeightQuantName(info.quantize),
        info.quantize_lm_head ? " + lm head" : "", DTypeName(info.kv_cache_dtype), info.backend,
        info.load_seconds,
        stats.prompt_tokens, stats.generated_tokens,
        FinishReasonName((*results)[0].finish_reason), (*results)[0].seed,
        stats.prefill_seconds * 1000.0, decode_ms,
        stats.generated_tokens > 0 ? total_ms / stats.generated_tokens : 0.0);
    if (options.speculative.num_speculative_tokens > 0) {
      std::cerr << absl::StrFormat(
          "[blossom] speculative: %d decode steps, %d of %d draft tokens accepted\n",
          stats.decode_step_seconds.size(), stats.accepted_draft_tokens, stats.draft_tokens);
    }
  }
  return 0;
}

// Whether flag `name` is set to anything but its default (giving the default changes nothing, so
// the checks below may treat it as not given).
bool FlagChanged(const char* name) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag != nullptr && flag->CurrentValue() != flag->DefaultValue();
}

// A flag given on the command line that the chosen mode would ignore: refused, since the run
// would not be the one asked for (--model with --server serves the server's model; --api_key
// without --server sends nothing). Returns 2 (printed) or 0.
int RefuseFlagsOfTheOtherMode(bool remote) {
  static constexpr const char* kLocalOnly[] = {
      "model", "tp", "threads", "launcher", "strict_load", "quantize", "quantize_lm_head",
      "kv_cache_dtype", "speculative_tokens", "ngram_lookup_max", "ngram_lookup_min",
      "lora_adapter"};
  static constexpr const char* kRemoteOnly[] = {"api_key", "api_key_file", "timeout", "tls",
                                                "tls_ca",  "tls_cert",     "tls_key"};
  const absl::Span<const char* const> others =
      remote ? absl::MakeConstSpan(kLocalOnly) : absl::MakeConstSpan(kRemoteOnly);
  for (const char* name : others) {
    if (FlagChanged(name)) {
      std::cerr << "blossom: --" << name
                << (remote ? " configures the in-process model: with --server the server's own "
                             "settings apply (drop it, or drop --server)"
                           : " applies to --server calls only")
                << std::endl;
      return 2;
    }
  }
  return 0;
}

// `text`: ResolveCommandLine's (empty for health and info).
int RunRemote(const std::string& command, const std::string& text) {
  if (int refused = RefuseFlagsOfTheOtherMode(/*remote=*/true)) return refused;
  RemoteOptions options;
  options.server = absl::GetFlag(FLAGS_server);
  absl::StatusOr<std::string> api_key =
      ResolveApiKey(absl::GetFlag(FLAGS_api_key), absl::GetFlag(FLAGS_api_key_file),
                    std::getenv(kApiKeyEnvironmentVariable));
  if (!api_key.ok()) {  // a usage error: exit 2
    std::cerr << "blossom: error: " << api_key.status().message() << std::endl;
    return 2;
  }
  options.api_key = *std::move(api_key);
  options.timeout_seconds = absl::GetFlag(FLAGS_timeout);
  options.tls = absl::GetFlag(FLAGS_tls);
  options.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.quiet = absl::GetFlag(FLAGS_quiet);
  options.show_token_ids = absl::GetFlag(FLAGS_show_token_ids);
  if (absl::GetFlag(FLAGS_num_beams) > 0) {  // generate only: ResolveCommandLine checked
    absl::StatusOr<v1::BeamSearchRequest> beam = BeamSearchFlags(text);
    if (!beam.ok()) return Fail(beam.status());
    return RunRemoteBeamSearch(options, *beam, std::cout, std::cerr);
  }
  v1::GenerateRequest request;
  request.set_text(text);
  v1::SamplingParameters* s = request.mutable_sampling();
  s->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  s->set_top_k(absl::GetFlag(FLAGS_top_k));
  s->set_top_p(static_cast<float>(absl::GetFlag(FLAGS_top_p)));
  s->set_typical_p(static_cast<float>(absl::GetFlag(FLAGS_typical_p)));
  s->set_min_p(static_cast<float>(absl::GetFlag(FLAGS_min_p)));
  s->set_repetition_penalty(static_cast<float>(absl::GetFlag(FLAGS_repetition_penalty)));
  s->set_frequency_penalty(static_cast<float>(absl::GetFlag(FLAGS_frequency_penalty)));
  s->set_presence_penalty(static_cast<float>(absl::GetFlag(FLAGS_presence_penalty)));
  if (const std::optional<uint64_t> seed = absl::GetFlag(FLAGS_seed)) s->set_seed(*seed);
  absl::StatusOr<std::string> schema = JsonSchemaFlag();
  if (!schema.ok()) return Fail(schema.status());
  if (!schema->empty()) s->set_json_schema(*schema);
  if (absl::GetFlag(FLAGS_json_compact)) s->set_json_compact(true);
  if (!absl::GetFlag(FLAGS_regex).empty()) s->set_regex(absl::GetFlag(FLAGS_regex));
  absl::StatusOr<std::string> grammar = GrammarFlag();
  if (!grammar.ok()) return Fail(grammar.status());
  if (!grammar->empty()) s->set_grammar(*grammar);
  v1::StoppingParameters* t = request.mutable_stopping();
  t->set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  t->set_min_new_tokens(absl::GetFlag(FLAGS_min_new_tokens));
  t->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  for (const std::string& stop : absl::GetFlag(FLAGS_stop)) t->add_stop(stop);
  return RunRemoteCommand(command, options, request, std::cout, std::cerr);
}

}  // namespace
// tokenize, health and info generate nothing: a generation flag given to them would be ignored,
// so the run is not the one asked for. Returns 2 (printed) or 0.
int RefuseGenerationFlags(const std::string& command) {
  static constexpr const char* kGenerationFlags[] = {
      "max_new_tokens", "min_new_tokens", "temperature", "top_k", "top_p", "typical_p", "min_p",
      "repetition_penalty", "seed", "stop", "ignore_eos", "frequency_penalty", "presence_penalty",
      "json_schema", "json_compact", "regex", "grammar"};
  for (const char* name : kGenerationFlags) {
    if (FlagChanged(name)) {
      std::cerr << "blossom: --" << name << " applies to generate and stream, not to '" << command
                << "'" << std::endl;
      return 2;
    }
  }
  return 0;
}

}  // namespace blossom

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "blossom generate --model DIR TEXT [--max_new_tokens N] [--temperature T] "
      "[--top_k K] [--top_p P] [--seed S] [--stop A,B] [--json_schema JSON|@FILE] [--regex RE] "
      "[--grammar GBNF|@FILE] "
      "[--num_beams N [--num_return_sequences K] [--length_penalty L] "
      "[--early_stopping false|true|never] [--show_token_ids]]\n"
      "  or: blossom generate|stream|tokenize --server HOST:PORT TEXT ...\n"
      "  or: blossom health|info --server HOST:PORT\n"
      "TEXT is one argument (quote several words; `--` before one that starts with a dash), or "
      "--prompt TEXT instead.");
  blossom::NormalizeDashedFlags(argc, argv);  // --max-new-tokens and --max_new_tokens alike
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() < 2) {
    std::cerr << "usage: " << absl::ProgramUsageMessage() << std::endl;
    return 2;
  }
  blossom::CommandLineArguments args;
  args.positional.assign(positional.begin() + 1, positional.end());
  args.prompt = absl::GetFlag(FLAGS_prompt);
  args.num_beams = absl::GetFlag(FLAGS_num_beams);
  for (const char* name : blossom::kBeamOnlyFlags) {
    if (blossom::FlagChanged(name)) args.beam_flags_set.push_back(name);
  }
  blossom::ResolvedCommand resolved;
  if (int usage_error = blossom::ResolveCommandLine(args, &resolved, std::cerr)) return usage_error;
  const std::string& command = resolved.command;
  if (command != "generate" && command != "stream") {
    if (int refused = blossom::RefuseGenerationFlags(command)) return refused;
  }
  if (!absl::GetFlag(FLAGS_server).empty()) return blossom::RunRemote(command, resolved.text);
  if (command == "generate") {
    if (int refused = blossom::RefuseFlagsOfTheOtherMode(/*remote=*/false)) return refused;
    return blossom::RunGenerate(resolved.text);
  }
  std::cerr << "blossom: '" << command << "' needs --server HOST:PORT" << std::endl;
  return 2;
}
