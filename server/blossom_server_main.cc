// `blossom-server`: the gRPC inference server.
//
//   blossom-server --model DIR [--port 8033] [--metrics-port 9090] [--tp N] ...
//   mpirun -np N blossom-server --model DIR --launcher mpi --tp N ...   (a process per rank)
//
// With --launcher mpi, rank 0 is the server described here; ranks > 0 open no port and only
// execute rank 0's step plans, exiting 0 when rank 0 stops (send SIGTERM to rank 0 to drain).
//
// Start-up order: the gRPC port opens first with health NOT_SERVING (calls get UNAVAILABLE
// "the model is loading"), then the model loads, then health turns SERVING. SIGTERM or SIGINT
// drains: health NOT_SERVING, new generations get UNAVAILABLE, generations in flight finish
// within --drain-timeout, then whatever is left is aborted (UNAVAILABLE, retry elsewhere) and
// the process exits 0. A second SIGTERM or SIGINT ends the drain at once (shutdown_signal.h).
//
// Threads: gRPC's callback executor (no thread per call), the engine loop, the metrics HTTP
// server's I/O and handler threads, the signal thread (shutdown_signal.h), and the main thread,
// which waits for the first signal and then runs the drain.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/model/cuda_kernel_flags.h"
#include "engine/model/lora_flags.h"
#include "engine/model/model_runner.h"
#include "engine/serving/engine.h"
#include "engine/speculative/speculative_flags.h"
#include "engine/tokenizer/chat_template_file.h"
#include "engine/tokenizer/tokenizer.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"
#include "kernels/dtype.h"
#include "kernels/status_macros.h"
#include "kernels/weight_quant.h"
#include "server/auth/api_keys.h"
#include "server/auth/exposure.h"
#include "server/auth/tls_credentials.h"
#include "server/logging/log_setup.h"
#include "server/blossom_service.h"
#include "server/engine_events.h"
#include "server/kv_fit.h"
#include "server/http/http_server.h"
#include "server/metrics/metrics.h"
#include "server/server_metrics.h"
#include "server/shutdown_signal.h"
#include "server/startup_limits.h"
#include "server/undecodable_request.h"
#include "spdlog/spdlog.h"
#include "tools/cli/dashed_flags.h"

ABSL_FLAG(std::string, model, "", "Model directory (config.json, *.safetensors, tokenizer.json).");
ABSL_FLAG(std::string, served_model_name, "",
          "Name clients use for the model (default: the model directory's base name).");
ABSL_FLAG(std::string, backend, "cpu", "Compute backend: cpu (cuda when built in).");
ABSL_FLAG(int32_t, tp, 1, "Tensor-parallel size (ranks).");
ABSL_FLAG(std::string, launcher, "threads",
          "How the tensor-parallel ranks run: threads (one process) or mpi (one process per rank "
          "under `mpirun -np <tp>`; rank 0 serves, the others execute its step plans).");
ABSL_FLAG(double, collective_timeout, 300.0,
          "--launcher mpi: seconds a rank waits for the others in one collective before the step "
          "fails (a rank that died or hangs).");
ABSL_FLAG(bool, nccl_async_collectives, true,
          "--backend cuda --tp > 1, --launcher threads: order NCCL collectives on each rank's "
          "compute stream with one bounded wait per step (a dead rank still fails the step after "
          "the timeout). false: every collective waits for the GPU and then for itself (two host "
          "waits per collective; the older, slower mode).");
ABSL_FLAG(bool, cuda_graphs, true,
          "--backend cuda, --tp 1: replay decode steps (up to --max_batch_size sequences, at most "
          "256; contexts up to --max_total_tokens) from CUDA graphs.");
ABSL_FLAG(bool, cuda_time_gemm, true,
          "--backend cuda, --tp 1: choose each cuBLASLt plan's algorithm by timing the "
          "heuristic's top candidates, at the start-up warm-up.");
ABSL_FLAG(int32_t, threads, 0,
          "CPU threads per rank (0 = the CPUs this process may use, its affinity mask capped by "
          "a cgroup CPU limit, / tp).");
ABSL_FLAG(bool, strict_load, false,
          "Refuse a checkpoint holding tensors a BLOOM model does not use (default: log them).");
ABSL_FLAG(std::string, quantize, "none",
          "Weight quantization made at load time: none, int8 or int4 (group-wise, 32 weights per "
          "scale), or bf16 (bf16 weights times activations rounded to bf16, fp32 sums: AVX512-BF16); "
          "the Linear weights only. The cpu backend only: other backends refuse to start.");
ABSL_FLAG(std::string, kv_cache_dtype, "auto",
          "The KV cache's dtype: auto (the activation dtype) or bfloat16 beside the cpu backend's fp32 "
          "activations (half the memory per token; K and V rows rounded when written).");
ABSL_FLAG(bool, quantize_lm_head, false,
          "With --quantize: quantize the LM head too (a tied head gets its own packed copy).");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address the gRPC server binds. Loopback by default, like the gateway's: calls need no "
          "key unless --api_keys_file is given. A container serving gRPC itself passes 0.0.0.0 "
          "(with API keys; a warning is logged at start for a non-loopback address without "
          "keys or TLS); the Kubernetes pods keep it on loopback behind their gateway.");
ABSL_FLAG(int32_t, port, 8033, "gRPC port (0 = pick a free one and print it).");
ABSL_FLAG(int32_t, metrics_port, 9090,
          "HTTP port of /metrics, /health and /live (-1 = off, 0 = free).");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "Address the metrics port binds. It serves /metrics and /health without an API key, "
          "so it is loopback-only unless a scraper elsewhere needs it (e.g. 0.0.0.0 in a pod).");
ABSL_FLAG(int64_t, kv_cache_mb, 256,
          "KV cache budget per rank in MiB (CPU backend; GPU backends size it from memory).");
ABSL_FLAG(double, gpu_memory_fraction, 0.90,
          "GPU backends: fraction of device memory for weights, activations and the KV cache.");
ABSL_FLAG(int32_t, block_size, 16, "Tokens per KV block.");
ABSL_FLAG(int32_t, max_batch_size, 256, "Sequences computed together (max_num_seqs).");
ABSL_FLAG(int32_t, max_batched_tokens, 2048, "New tokens per engine step (the token budget).");
ABSL_FLAG(int32_t, max_waiting_requests, 1024,
          "Queued requests before new ones are refused with RESOURCE_EXHAUSTED.");
ABSL_FLAG(int32_t, max_input_tokens, 0,
          "Longest prompt accepted (OUT_OF_RANGE beyond). 0: max_total_tokens - 1, the longest "
          "prompt that leaves room for one new token (TGI 3's default; vLLM has no other cap).");
ABSL_FLAG(int32_t, max_total_tokens, 0,
          "Cap on prompt + max_new_tokens. 0: 2048, or what the KV cache holds if that is less "
          "(logged); a value the KV cache cannot hold stops the server at start.");
ABSL_FLAG(bool, prefix_caching, true, "Share KV blocks of identical prompt prefixes.");
ABSL_FLAG(bool, device_sampling, true,
          "Sample each step's logits where the backend left them (on the GPU for cuda: only "
          "token ids, requested logprobs and prompt-logprob rows reach the host). false: copy "
          "every step's logits to the host and sample there. Identical results on cpu.");
ABSL_FLAG(int32_t, max_prompt_logprob_rows, 256,
          "Prompt tokens of prompt-logprob requests computed per step, together: each needs a "
          "row of logits (1 MB in fp32 for BLOOM). Larger: faster scoring, more memory a step.");
ABSL_FLAG(int32_t, speculative_max_running, 4,
          "Draft only while at most this many sequences run (larger decode batches are "
          "compute-bound, where drafts cost more than they save).");
ABSL_FLAG(std::string, scheduling_policy, "fcfs",
          "fcfs: first come, first served, and a request's non-zero priority is refused; "
          "priority: a request's priority orders the queue (lower runs first; vLLM's flag).");
ABSL_FLAG(int32_t, max_message_bytes, 1 << 20, "Largest gRPC request message accepted.");
ABSL_FLAG(double, drain_timeout, 30.0,
          "Seconds in-flight requests get to finish on SIGTERM (a second SIGTERM or SIGINT ends "
          "the wait at once).");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: serve TLS (with --tls-key). The files are re-read every second: "
          "renewed ones serve new connections without a restart.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls-cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: require and verify client certificates (mutual TLS).");
ABSL_FLAG(std::string, api_keys_file, "",
          "File with one API key per line; calls must send 'authorization: Bearer <key>'. Read "
          "once at start: a changed file takes effect at the next restart.");
ABSL_FLAG(std::string, grpc_reflection, "auto",
          "gRPC server reflection (grpcurl list/describe): auto = on without --api_keys_file, "
          "off with it (reflection answers without a key); true or false decide either way.");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error, critical, off.");
ABSL_FLAG(std::string, log_format, "text",
          "text, or json: one JSON object per line (timestamp, level, target, thread, message) "
          "for log collectors.");

namespace blossom {
namespace {

constexpr char kVersion[] = "0.1.0";

int Fail(const absl::Status& status) {
  spdlog::critical("{}", status.ToString());
  return 1;
}

// --max_total_tokens with its default (0) resolved; start-up may lower the default to what the
// KV cache holds (kv_fit.h).
int32_t MaxTotalTokens() { return ResolveMaxTotalTokens(absl::GetFlag(FLAGS_max_total_tokens)); }

int32_t MaxInputTokens(int32_t max_total_tokens) {
  return ResolveMaxInputTokens(absl::GetFlag(FLAGS_max_input_tokens), max_total_tokens);
}

StartupLimits StartupLimitsFromFlags() {
  StartupLimits l;
  l.port = absl::GetFlag(FLAGS_port);
  l.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  l.drain_timeout_s = absl::GetFlag(FLAGS_drain_timeout);
  l.max_total_tokens = absl::GetFlag(FLAGS_max_total_tokens);
  l.max_input_tokens = absl::GetFlag(FLAGS_max_input_tokens);
  l.speculative_max_running = absl::GetFlag(FLAGS_speculative_max_running);
  l.max_prompt_logprob_rows = absl::GetFlag(FLAGS_max_prompt_logprob_rows);
  l.max_waiting_requests = absl::GetFlag(FLAGS_max_waiting_requests);
  l.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  l.max_batched_tokens = absl::GetFlag(FLAGS_max_batched_tokens);
  l.block_size = absl::GetFlag(FLAGS_block_size);
  return l;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials() {
  const std::string cert = absl::GetFlag(FLAGS_tls_cert), key = absl::GetFlag(FLAGS_tls_key);
  const std::string ca = absl::GetFlag(FLAGS_tls_client_ca);
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key must be given together");
  }
  if (cert.empty()) {
    if (!ca.empty()) return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert");
    return grpc::InsecureServerCredentials();
  }
  // Followed after start: renewed files serve new connections without a restart.
  return ServerTlsCredentials({cert, key, ca});
}

std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

v1::ModelInfo DescribeModel(const ModelRunner& runner, const std::string& name,
                            const SchedulerConfig& scheduler, int32_t max_input_tokens) {
  const BloomConfig& config = runner.config();
  const ModelInfo& info = runner.info();
  v1::ModelInfo out;
  out.set_model_id(name);
  out.set_model_dir(BaseName(info.model_dir));  // never the server's filesystem path
  out.set_dtype(DTypeName(info.weight_dtype));
  out.set_backend(info.backend);
  out.set_tensor_parallel_size(runner.world_size());
  out.set_vocab_size(static_cast<int32_t>(config.vocab_size));
  out.set_hidden_size(static_cast<int32_t>(config.hidden_size));
  out.set_num_layers(static_cast<int32_t>(config.n_layer));
  out.set_num_heads(static_cast<int32_t>(config.n_head));
  out.set_eos_token_id(config.eos_token_id);
  out.set_bos_token_id(config.bos_token_id);
  v1::ModelLimits* limits = out.mutable_limits();
  limits->set_max_input_tokens(max_input_tokens);
  limits->set_max_total_tokens(scheduler.max_total_tokens);
  limits->set_max_new_tokens(scheduler.max_total_tokens - 1);
  limits->set_max_batch_size(scheduler.max_num_seqs);
  limits->set_max_batched_tokens(scheduler.max_num_batched_tokens);
  limits->set_max_waiting_requests(scheduler.max_waiting_requests);
  limits->set_max_stop_strings(static_cast<int32_t>(kMaxStopStrings));
  limits->set_max_logprobs(kMaxLogprobs);
  out.set_kv_block_size(scheduler.block_size);
  out.set_version(kVersion);
  return out;
}

// Removes gRPC reflection (answered without a key) from a builder: gRPC's static initializer
// adds its plugin to every builder wherever the library is linked, so not registering it is
// not enough.
class WithoutReflection : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    auto reflection = [](const auto& p) { return p->name() == "proto_server_reflection"; };
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(), reflection), plugins->end());
  }
};

// A rank > 0 of --launcher mpi: no ports and no engine; it loads its slice and executes the
// leader's step plans until the leader shuts down, then exits 0. SIGTERM and SIGINT stay blocked
// (mpirun forwards them to every rank, but a follower must keep computing while the leader
// drains); only if the leader has not released it within --drain_timeout + 30 s of a signal does
// it give up and exit 1.
int RunFollower(const ModelRunnerOptions& options, const sigset_t& signals) {
  std::thread([signals] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    const double grace = absl::GetFlag(FLAGS_drain_timeout) + 30.0;
    spdlog::info("received {}: waiting up to {} s for the leader (rank 0) to drain and stop",
                 signal_number == SIGTERM ? "SIGTERM" : "SIGINT", grace);
    std::this_thread::sleep_for(std::chrono::duration<double>(grace));
    spdlog::critical("the leader did not stop this rank within {} s of the signal; exiting", grace);
    std::_Exit(1);
  }).detach();
  auto runner = ModelRunner::Create(options);
  if (!runner.ok()) return Fail(runner.status());
  const absl::Status served = (*runner)->RunFollower();
  runner->reset();
  if (!served.ok()) return Fail(served);
  spdlog::info("stopped (the leader shut down)");
  return 0;
}

int Run() {
  const sigset_t signals = BlockShutdownSignals();
  if (absl::Status logging = ConfigureLogging(absl::GetFlag(FLAGS_log_level),
                                              absl::GetFlag(FLAGS_log_format), "blossom-server");
      !logging.ok()) {
    return Fail(logging);
  }
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  if (model_dir.empty()) return Fail(absl::InvalidArgumentError("--model is required"));
  ModelRunnerOptions runner_options;
  runner_options.model_dir = model_dir;
  runner_options.backend = absl::GetFlag(FLAGS_backend);
  runner_options.launcher = absl::GetFlag(FLAGS_launcher);
  runner_options.collective_timeout_seconds = absl::GetFlag(FLAGS_collective_timeout);
  runner_options.nccl_async_collectives = absl::GetFlag(FLAGS_nccl_async_collectives);
  runner_options.tensor_parallel_size = absl::GetFlag(FLAGS_tp);
  runner_options.threads_per_rank = absl::GetFlag(FLAGS_threads);
  runner_options.gpu_memory_fraction = absl::GetFlag(FLAGS_gpu_memory_fraction);
  runner_options.strict_load = absl::GetFlag(FLAGS_strict_load);
  absl::StatusOr<WeightQuant> quantize = ParseWeightQuant(absl::GetFlag(FLAGS_quantize));
  if (!quantize.ok()) return Fail(quantize.status());
  runner_options.quantize = *quantize;
  runner_options.quantize_lm_head = absl::GetFlag(FLAGS_quantize_lm_head);
  absl::StatusOr<std::optional<DType>> kv_cache_dtype = ParseKvCacheDtype(absl::GetFlag(FLAGS_kv_cache_dtype));
  if (!kv_cache_dtype.ok()) return Fail(kv_cache_dtype.status());
  runner_options.kv_cache_dtype = *kv_cache_dtype;
  if (absl::Status lora = ApplyLoraAdapterFlag(&runner_options); !lora.ok()) return Fail(lora);
  runner_options.cuda_kernels = CudaKernelOptionsFromFlags();
  runner_options.time_gemm_candidates =
      runner_options.backend == "cuda" && absl::GetFlag(FLAGS_cuda_time_gemm);
  if (runner_options.backend == "cuda" && absl::GetFlag(FLAGS_cuda_graphs)) {
    runner_options.step_graphs = true;
    runner_options.step_graph_options.max_batch =
        std::clamp(absl::GetFlag(FLAGS_max_batch_size), 1, 256);
    runner_options.step_graph_options.max_context = std::max(1, MaxTotalTokens());
  }
  // Only rank 0 serves (--launcher mpi); the others follow it.
  auto process_rank = ModelRunner::ProcessRank(runner_options);
  if (!process_rank.ok()) return Fail(process_rank.status());
  if (*process_rank != 0) return RunFollower(runner_options, signals);
  // Never deleted: its thread may wake on a signal until the process is gone.
  ShutdownSignal& shutdown = *new ShutdownSignal(signals);  // while loading: exits at once
  const std::string served_name = absl::GetFlag(FLAGS_served_model_name).empty()
                                      ? BaseName(model_dir)
                                      : absl::GetFlag(FLAGS_served_model_name);

  ServiceOptions service_options;
  service_options.limits.max_total_tokens = MaxTotalTokens();
  service_options.limits.max_input_tokens =
      MaxInputTokens(service_options.limits.max_total_tokens);
  service_options.limits.served_model_name = served_name;
  const std::string policy = absl::GetFlag(FLAGS_scheduling_policy);
  if (policy != "fcfs" && policy != "priority") {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--scheduling_policy must be fcfs or priority, not '", policy, "'")));
  }
  service_options.limits.priority_scheduling = policy == "priority";
  if (!absl::GetFlag(FLAGS_api_keys_file).empty()) {
    auto keys = auth::ApiKeys::LoadFile(absl::GetFlag(FLAGS_api_keys_file));
    if (!keys.ok()) return Fail(keys.status());
    if (const std::vector<int>& weak = keys->short_key_lines(); !weak.empty()) {
      spdlog::warn("--api_keys_file: the keys on line(s) {} are shorter than {} characters and "
                   "may be guessed; use random keys (e.g. `openssl rand -hex 32`)",
                   absl::StrJoin(weak, ", "), auth::kMinStrongKeyLength);
    }
    service_options.api_keys = std::move(*keys);
  }
  const absl::StatusOr<bool> reflection = auth::ReflectionEnabled(
      absl::GetFlag(FLAGS_grpc_reflection), service_options.api_keys.enabled());
  if (!reflection.ok()) return Fail(reflection.status());
  // Before the model loads: a bad flag fails in a second, not after minutes of loading.
  if (absl::Status limits = CheckStartupLimits(StartupLimitsFromFlags()); !limits.ok()) {
    return Fail(limits);
  }
  absl::StatusOr<NgramProposerConfig> speculative = NgramProposerConfigFromFlags();
  if (!speculative.ok()) return Fail(speculative.status());

  metrics::Registry registry;
  ServerMetrics server_metrics(&registry, served_name, kVersion);
  BlossomService service(service_options, &server_metrics);

  // gRPC first, so health and UNAVAILABLE answers exist while the model loads.
  auto credentials = Credentials();
  if (!credentials.ok()) return Fail(credentials.status());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Health stays open to probes; reflection only where --grpc_reflection (auth/exposure.h) says.
  if (!*reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  int bound_port = 0;
  const std::string address =
      absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port));
  builder.AddListeningPort(address, *credentials, &bound_port);
  // gRPC sets SO_REUSEPORT by default on Linux: a second server on a taken port would start and
  // the kernel would split new connections between the two (different models, perhaps).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  builder.RegisterService(&service);
  builder.experimental().SetInterceptorCreators(UndecodableRequestInterceptors(
      [&service](const ClientMetadata& metadata) { return service.Authenticate(metadata); },
      &server_metrics));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    return Fail(absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address,
        " (the port is in use by another process, or the host is not an address of this machine)")));
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  const std::string kServiceName = "blossom.v1.Blossom";
  health->SetServingStatus(false);
  health->SetServingStatus(kServiceName, false);
  const bool tls = !absl::GetFlag(FLAGS_tls_cert).empty();
  const bool keys = service_options.api_keys.enabled();
  spdlog::info("gRPC listening on {}:{} ({}, API keys {}, reflection {}), loading {}",
               absl::GetFlag(FLAGS_host), bound_port, tls ? "TLS" : "plaintext",
               keys ? "on" : "off", *reflection ? "on" : "off", model_dir);
  // Not loopback: no keys (anyone may generate) or no TLS (keys and text in clear) is warned of.
  for (const std::string& warning : auth::ExposureWarnings(absl::GetFlag(FLAGS_host), keys, tls)) {
    spdlog::warn("{}", warning);
  }

  std::unique_ptr<http::Server> metrics_server;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    http::ServerOptions http_options;
    http_options.host = absl::GetFlag(FLAGS_metrics_host);
    http_options.port = absl::GetFlag(FLAGS_metrics_port);
    http_options.handler_threads = 1;
    auto started = http::Server::Start(
        http_options, [&](const http::Request& request, std::shared_ptr<http::ResponseWriter> w) {
          http::Response response;
          if (request.method != "GET" && request.method != "HEAD") {
            response.status = 405;
            response.body = "only GET\n";
          } else if (request.path == "/metrics") {
            response.headers.emplace_back("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
            response.body = registry.Render();
          } else if (request.path == "/health") {
            const bool serving = service.state() == BlossomService::State::kServing;
            response.status = serving ? 200 : 503;
            response.body = serving ? "SERVING\n" : "NOT_SERVING\n";
          } else if (request.path == "/live") {
            // Liveness: false only when the engine failed for good (a restart is the cure);
            // loading and draining are alive.
            const bool failed = service.state() == BlossomService::State::kFailed;
            response.status = failed ? 503 : 200;
            response.body = failed ? "FAILED: the model can no longer run; restart\n" : "LIVE\n";
          } else {
            response.status = 404;
            response.body = "not found; try /metrics, /health or /live\n";
          }
          w->Send(std::move(response));
        });
    if (!started.ok()) return Fail(started.status());
    metrics_server = std::move(*started);
    spdlog::info("metrics on http://{}:{}/metrics", absl::GetFlag(FLAGS_metrics_host),
                 metrics_server->port());
  }
  // Machine-readable line for launchers and tests that ask for port 0.
  std::cout << "blossom-server listening grpc_port=" << bound_port
            << " metrics_port=" << (metrics_server ? metrics_server->port() : -1) << std::endl;

  auto runner = ModelRunner::Create(runner_options);
  if (!runner.ok()) return Fail(runner.status());
  auto tokenizer = Tokenizer::FromModelDir(model_dir, (*runner)->vocab_size());
  if (!tokenizer.ok()) return Fail(tokenizer.status());
  if (const std::string file = FindChatTemplateFile(model_dir); !file.empty()) {
    spdlog::warn("{} holds a chat template, which Blossom does not run (no Jinja): blossom-gateway "
                 "renders chats with its own role prefixes and suffixes (its --chat-template, "
                 "clients/gateway/README.md); make them this model's, or send formatted prompts "
                 "to /v1/completions.", file);
  }

  EngineConfig engine_config;
  SchedulerConfig& sc = engine_config.scheduler;
  sc.max_num_seqs = absl::GetFlag(FLAGS_max_batch_size);
  sc.max_num_batched_tokens = absl::GetFlag(FLAGS_max_batched_tokens);
  sc.max_total_tokens = MaxTotalTokens();
  sc.max_waiting_requests = absl::GetFlag(FLAGS_max_waiting_requests);
  sc.block_size = absl::GetFlag(FLAGS_block_size);
  sc.enable_prefix_caching = absl::GetFlag(FLAGS_prefix_caching);
  engine_config.kv_cache_bytes = absl::GetFlag(FLAGS_kv_cache_mb) << 20;
  engine_config.device_sampling = absl::GetFlag(FLAGS_device_sampling);
  engine_config.speculative = *speculative;
  engine_config.speculative_max_running = absl::GetFlag(FLAGS_speculative_max_running);
  engine_config.max_prompt_logprob_rows = absl::GetFlag(FLAGS_max_prompt_logprob_rows);
  // GPU backends: whatever the memory fraction leaves after weights and activations.
  std::string budget_flag = "--kv_cache_mb";
  if (auto from_memory = (*runner)->KvCacheBytesFromMemory(); from_memory.ok()) {
    engine_config.kv_cache_bytes = *from_memory;
    budget_flag = "--gpu_memory_fraction";
  } else if (!absl::IsUnimplemented(from_memory.status())) {
    return Fail(from_memory.status());
  }
  // One request of max_total_tokens must fit the pool (server/kv_fit.h).
  auto fit = FitMaxTotalTokens(
      engine_config.kv_cache_bytes, (*runner)->KvBytesPerBlock(sc.block_size), sc.block_size,
      sc.max_total_tokens,
      /*limit_given=*/absl::GetFlag(FLAGS_max_total_tokens) != 0,
      budget_flag);
  if (!fit.ok()) return Fail(fit.status());
  if (!fit->warning.empty()) spdlog::warn("{}", fit->warning);
  sc.max_total_tokens = fit->max_total_tokens;
  // The default follows a cap lowered to the KV cache; a given value past it is lowered too
  // (said here, against the flag as given: the limit set before loading is clamped already).
  const int32_t max_input = MaxInputTokens(sc.max_total_tokens);
  if (const int32_t given = absl::GetFlag(FLAGS_max_input_tokens); given > max_input) {
    spdlog::warn("--max_input_tokens {} is lowered to {}: max_total_tokens is {}", given, max_input,
                 sc.max_total_tokens);
  }
  service_options.limits.max_input_tokens = max_input;
  // A failure for good turns health NOT_SERVING: load balancers stop routing here.
  EngineEvents engine_events(&server_metrics, &service, [health, kServiceName] {
    health->SetServingStatus(false);
    health->SetServingStatus(kServiceName, false);
  });
  auto engine = Engine::Create(runner->get(), tokenizer->get(), engine_config, &engine_events);
  if (!engine.ok()) return Fail(engine.status());
  registry.AddCollectHook([&] { server_metrics.UpdateSchedulerTotals((*engine)->scheduler_stats()); });

  service.SetEngine(engine->get(), tokenizer->get(),
                    DescribeModel(**runner, served_name, (*engine)->scheduler_config(),
                                  service_options.limits.max_input_tokens));
  shutdown.Serving();
  health->SetServingStatus(true);
  health->SetServingStatus(kServiceName, true);
  spdlog::info(
      "serving {} ({} layers, hidden {}, {} KV blocks of {} tokens, backend {}, tp {}, "
      "device sampling {}, speculative tokens {})",
      served_name, (*runner)->config().n_layer, (*runner)->config().hidden_size,
      (*engine)->scheduler_stats().blocks_total, sc.block_size, (*runner)->info().backend,
      (*runner)->world_size(), engine_config.device_sampling ? "on" : "off",
      speculative->num_speculative_tokens);

  const char* signal_name = shutdown.Wait();
  spdlog::info("received {}: draining (timeout {} s), {} generations in flight", signal_name,
               absl::GetFlag(FLAGS_drain_timeout), service.generations_in_flight());
  service.StartDraining();
  health->SetServingStatus(false);
  health->SetServingStatus(kServiceName, false);
  const std::chrono::duration<double> drain_timeout(absl::GetFlag(FLAGS_drain_timeout));
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(drain_timeout);
  // gRPC's shutdown starts now: the listener closes and every connection gets a GOAWAY, so
  // clients with a long-lived channel reconnect to a replica that serves instead of meeting
  // SHUTTING_DOWN here until the drain ends; the calls in flight run on.
  std::atomic<bool> grpc_stopped{false};
  std::thread grpc_shutdown([&] {
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::duration_cast<std::chrono::system_clock::duration>(
                         drain_timeout + std::chrono::seconds(5)));
    grpc_stopped = true;
  });
  // Until the calls in flight are done, the deadline, or a second signal (which wakes the wait).
  bool second_signal = false;
  while (!second_signal && service.generations_in_flight() > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    second_signal = shutdown.WaitForSecond(std::chrono::milliseconds(20));
  }
  const char* cut_by = second_signal ? "a second signal" : "the drain timeout";
  const int64_t left = service.generations_in_flight();
  if (left > 0) spdlog::warn("{}: aborting {} generations", cut_by, left);
  // Ends what is left in the engine: those calls finish by themselves, with UNAVAILABLE,
  // SHUTTING_DOWN and a retry delay, once their reactors have written what they had. Only then
  // (or after a moment: a client that stopped reading is not waited for) are the calls that never
  // end by themselves (health watches, such as the gateway's) cancelled, which lets the shutdown
  // finish now rather than at its deadline; cancelled earlier, the ended calls would lose their
  // status to gRPC's bare UNAVAILABLE. Repeated: the cancellation only reaches calls once the
  // shutdown has begun on its thread.
  (*engine)->Shutdown();
  const auto ended_by = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (service.generations_in_flight() > 0 && std::chrono::steady_clock::now() < ended_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  while (!grpc_stopped) {
    grpc_server_cancel_all_calls(server->c_server());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  grpc_shutdown.join();
  if (metrics_server) metrics_server->Stop();
  spdlog::info("stopped ({} generations were cut by {})", left, cut_by);
  return 0;
}

}  // namespace
}  // namespace blossom

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("blossom-server --model DIR [--port N] [--metrics_port N] ...");
  blossom::NormalizeDashedFlags(argc, argv);  // --max-batch-size and --max_batch_size alike
  absl::ParseCommandLine(argc, argv);
  return blossom::Run();
}
