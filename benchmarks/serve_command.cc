#include "benchmarks/serve_command.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "benchmarks/arrivals.h"
#include "benchmarks/grpc_load_client.h"
#include "benchmarks/http_sse_client.h"
#include "benchmarks/length_dist.h"
#include "benchmarks/load_runner.h"
#include "benchmarks/synthetic_prompts.h"
#include "engine/loader/file_util.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

// Thread-per-request HTTP needs a bound; beyond it requests would wait for a worker unmeasured.
constexpr int kMaxHttpConcurrency = 1024;

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm;
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Fails before any work if an output file could not be created.
absl::Status CheckOutputDirectory(const std::string& path, const char* flag) {
  if (path.empty()) return absl::OkStatus();
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : path.substr(0, std::max<size_t>(slash, 1));
  if (GetPathKind(dir) != PathKind::kDirectory) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": directory '", dir, "' does not exist"));
  }
  return absl::OkStatus();
}

// --arrival "" (not given) is poisson, or gamma when --burstiness is not 1 (vLLM has only
// --burstiness, so its users pass that alone); an explicit poisson with another burstiness is a
// contradiction.
absl::StatusOr<ArrivalProcess> ResolveArrival(const std::string& arrival, double burstiness) {
  if (arrival.empty()) return burstiness == 1.0 ? ArrivalProcess::kPoisson : ArrivalProcess::kGamma;
  BLOSSOM_ASSIGN_OR_RETURN(ArrivalProcess process, ParseArrivalProcess(arrival));
  if (process == ArrivalProcess::kPoisson && burstiness != 1.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--arrival poisson has burstiness 1, but --burstiness ", burstiness,
        " was given: drop --arrival (or pass --arrival gamma) for gamma arrivals"));
  }
  return process;
}

absl::Status NothingSucceeded(const ServeReport& report) {
  std::string reasons;
  for (const auto& [reason, count] : report.summary.failures) {
    absl::StrAppend(&reasons, reasons.empty() ? "" : ", ", reason, " x", count);
  }
  std::string first = "no token received";
  for (const RequestRecord& r : report.records) {
    if (!r.success) {
      first = r.error.substr(0, 300);
      break;
    }
  }
  return absl::UnavailableError(absl::StrCat("no request succeeded: all ", report.summary.failed,
                                             " failed (", reasons, "); the first: ", first));
}

// Seeds of the independent random streams, derived from --seed.
uint64_t SubSeed(uint64_t seed, uint64_t stream) { return seed * 0x9E3779B97F4A7C15ULL + stream; }

}  // namespace

absl::StatusOr<ServeReport> RunServeCommand(const ServeCommandOptions& options, std::ostream* log) {
  ServeReport report;
  report.date_utc = UtcNow();
  report.command = options.command;
  report.commit = options.commit;
  report.machine = options.machine;
  report.settings = options.settings;
  ServeSettings& st = report.settings;

  // Validate everything before connecting.
  if (st.target.empty()) return absl::InvalidArgumentError("--target is required");
  if (st.num_requests < 1) return absl::InvalidArgumentError("--num-requests must be >= 1");
  if (st.max_concurrency < 0) return absl::InvalidArgumentError("--max-concurrency must be >= 0");
  // One meaning on both protocols: the whole request's deadline (gRPC's deadline; on HTTP the
  // connect, the send and every read share it).
  if (!(options.request_timeout_s >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--request-timeout ", options.request_timeout_s,
                     ": must be >= 0 seconds (each request's whole deadline; 0 = none)"));
  }
  BLOSSOM_ASSIGN_OR_RETURN(LengthDist prompt_dist, ParseLengthDist(st.prompt_len_dist));
  BLOSSOM_ASSIGN_OR_RETURN(LengthDist output_dist, ParseLengthDist(st.output_len_dist));
  st.prompt_len_dist = prompt_dist.ToString();
  st.output_len_dist = output_dist.ToString();
  BLOSSOM_ASSIGN_OR_RETURN(ArrivalProcess process, ResolveArrival(st.arrival, st.burstiness));
  st.arrival = ArrivalProcessName(process);
  ArrivalOptions arrival_options;
  arrival_options.request_rate = st.request_rate;
  arrival_options.process = process;
  arrival_options.burstiness = st.burstiness;
  arrival_options.seed = SubSeed(st.seed, 3);
  BLOSSOM_ASSIGN_OR_RETURN(std::vector<double> schedule,
                           ArrivalSchedule(arrival_options, st.num_requests));
  if (st.prompt_kind != "text" && st.prompt_kind != "ids") {
    return absl::InvalidArgumentError("--prompt-kind must be text or ids");
  }
  // 0 leaves an objective out; a negative one is a typo that would silently turn goodput into
  // plain throughput.
  if (!(st.slo.ttft_ms >= 0) || !(st.slo.tpot_ms >= 0) || !(st.slo.e2e_ms >= 0)) {
    return absl::InvalidArgumentError("--slo-ttft-ms, --slo-tpot-ms and --slo-e2e-ms must be >= 0 "
                                      "(0 = no objective)");
  }
  // Checked whatever the target: a misspelt API is an error on a gRPC target too.
  if (!st.http_api.empty()) BLOSSOM_RETURN_IF_ERROR(ParseHttpApi(st.http_api).status());
  BLOSSOM_RETURN_IF_ERROR(CheckOutputDirectory(options.outputs.json, "--json"));
  BLOSSOM_RETURN_IF_ERROR(CheckOutputDirectory(options.outputs.markdown, "--markdown"));
  BLOSSOM_RETURN_IF_ERROR(CheckOutputDirectory(options.outputs.svg_prefix, "--svg-prefix"));
  BLOSSOM_ASSIGN_OR_RETURN(std::string corpus_raw, ReadFileToString(st.corpus));
  const std::string corpus = NormalizeCorpus(corpus_raw);

  std::unique_ptr<LoadClient> client;
  report.server = nullptr;
  if (absl::StartsWith(st.target, "grpc://")) {
    st.protocol = "grpc";
    st.http_api.clear();
    GrpcLoadClientOptions grpc_options;
    BLOSSOM_ASSIGN_OR_RETURN(grpc_options.address, GrpcAddressFromTarget(st.target));
    grpc_options.api_key = options.api_key;
    grpc_options.model = st.model;
    grpc_options.deadline_s = options.request_timeout_s;
    auto grpc_client = std::make_unique<GrpcLoadClient>(grpc_options);
    BLOSSOM_ASSIGN_OR_RETURN(v1::ModelInfo info, grpc_client->GetModelInfo());
    std::string json;
    google::protobuf::util::JsonPrintOptions print;
    print.preserve_proto_field_names = true;
    if (google::protobuf::util::MessageToJsonString(info, &json, print).ok()) {
      report.server = nlohmann::json::parse(json, nullptr, false);
    }
    if (log) *log << "server: model " << info.model_id() << ", backend " << info.backend() << "\n";
    client = std::move(grpc_client);
  } else if (absl::StartsWith(st.target, "http://")) {
    st.protocol = "http";
    if (st.prompt_kind == "ids") {
      return absl::InvalidArgumentError("--prompt-kind ids needs a grpc:// target");
    }
    HttpSseClientOptions http_options;
    BLOSSOM_ASSIGN_OR_RETURN(http_options.target, ParseHttpTarget(st.target));
    BLOSSOM_ASSIGN_OR_RETURN(http_options.api, ParseHttpApi(st.http_api));
    http_options.api_key = options.api_key;
    http_options.model = st.model;
    http_options.request_timeout_s = options.request_timeout_s;
    const int wanted = st.max_concurrency > 0 ? st.max_concurrency : st.num_requests;
    if (wanted > kMaxHttpConcurrency) {
      st.max_concurrency = kMaxHttpConcurrency;
      if (log) *log << "http: concurrency capped at " << kMaxHttpConcurrency << " (one thread each)\n";
    }
    http_options.threads = std::min({wanted, kMaxHttpConcurrency, st.num_requests});
    client = std::make_unique<HttpSseClient>(http_options);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--target '", st.target, "': expected grpc://HOST:PORT or http://HOST:PORT"));
  }

  const std::vector<int32_t> prompt_lengths =
      SampleLengths(prompt_dist, st.num_requests, SubSeed(st.seed, 1));
  const std::vector<int32_t> output_lengths =
      SampleLengths(output_dist, st.num_requests, SubSeed(st.seed, 2));
  BLOSSOM_ASSIGN_OR_RETURN(PromptSet prompts,
                           BuildPrompts(*client, corpus, prompt_lengths, st.prompt_kind == "ids",
                                        SubSeed(st.seed, 4)));
  report.prompts_exact = prompts.exact;
  report.tokenize_calls = prompts.tokenize_calls;
  for (int i = 0; i < st.num_requests; ++i) {
    prompts.requests[static_cast<size_t>(i)].max_new_tokens = output_lengths[static_cast<size_t>(i)];
  }
  if (log) {
    *log << "prompts: " << st.num_requests << " (" << st.prompt_kind << "), " << prompts.exact
         << " of exactly the sampled length, " << prompts.tokenize_calls << " Tokenize calls\n";
  }

  // vLLM's "initial test run": one request, untimed, so a misconfigured target fails fast and
  // first-use costs (connection setup, lazy allocation) stay out of the numbers.
  if (options.warmup) {
    std::vector<LoadRequest> warm = {prompts.requests.front()};
    warm[0].max_new_tokens = std::min(warm[0].max_new_tokens, 4);
    LoadRunResult w = RunLoad(*client, warm, {0.0}, 1);
    if (!w.records[0].success) {
      return absl::UnavailableError(absl::StrCat("warm-up request failed: ", w.records[0].error));
    }
  }

  if (log) {
    *log << "sending " << st.num_requests << " requests at "
         << (std::isinf(st.request_rate) ? std::string("inf") : absl::StrCat(st.request_rate))
         << " req/s (" << st.arrival << (process == ArrivalProcess::kGamma
                                             ? absl::StrCat(", burstiness ", st.burstiness)
                                             : "")
         << "), max concurrency "
         << (st.max_concurrency > 0 ? absl::StrCat(st.max_concurrency) : "unlimited") << "\n";
    log->flush();
  }
  LoadRunResult run = RunLoad(*client, std::move(prompts.requests), schedule, st.max_concurrency);
  client.reset();  // HTTP: joins the workers (all idle by now)
  report.records = std::move(run.records);
  report.summary = SummarizeRequests(report.records, run.duration_s, st.slo);
  if (log) *log << FormatServeTable(report) << std::flush;
  BLOSSOM_RETURN_IF_ERROR(WriteServeFiles(report, options.outputs));
  // A run with nothing measured is a failed run (the files above show every request's error).
  if (report.summary.completed == 0) return NothingSucceeded(report);
  return report;
}

}  // namespace blossom
