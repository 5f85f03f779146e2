#include "clients/remote_commands.h"

#include <chrono>
#include <memory>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clients/gateway/credential_files.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "proto/blossom/v1/blossom.grpc.pb.h"
#include "proto/blossom/v1/stream_request.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace blossom {
namespace {

const char* FinishReasonText(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH: return "length";
    case v1::FINISH_REASON_EOS_TOKEN: return "eos_token";
    case v1::FINISH_REASON_STOP_TOKEN: return "stop_token";
    case v1::FINISH_REASON_STOP_STRING: return "stop_string";
    case v1::FINISH_REASON_CANCELLED: return "cancelled";
    case v1::FINISH_REASON_ERROR: return "error";
    case v1::FINISH_REASON_ABORTED: return "aborted";
    default: return "unspecified";
  }
}

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    default: return "ERROR";
  }
}

int Failed(const grpc::Status& status, std::ostream& err) {
  err << "blossom: error: " << CodeName(status.error_code()) << ": " << status.error_message()
      << std::endl;
  return 1;
}

std::shared_ptr<grpc::Channel> Connect(const RemoteOptions& options, std::ostream& err,
                                       bool* ok) {
  *ok = false;
  // gRPC's 4 MiB receive default fails a unary answer with logprobs for a few thousand tokens.
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  if (!options.tls) {
    // A CA file or a client certificate says TLS was meant: plaintext would send --api_key in
    // the clear.
    for (const auto& [flag, value] :
         {std::pair<const char*, const std::string&>{"--tls_ca", options.tls_ca_file},
          {"--tls_cert", options.tls_cert_file},
          {"--tls_key", options.tls_key_file}}) {
      if (!value.empty()) {
        err << "blossom: error: " << flag << " is set without --tls (add --tls)" << std::endl;
        return nullptr;
      }
    }
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    err << "blossom: error: --tls_cert and --tls_key go together (a client certificate is "
           "useless without its key)"
        << std::endl;
    return nullptr;
  }
  if (!(options.timeout_seconds >= 0)) {  // also NaN
    err << "blossom: error: --timeout must be >= 0 seconds (0 = none)" << std::endl;
    return nullptr;
  }
  if (!options.tls) {
    *ok = true;
    return grpc::CreateCustomChannel(options.server, grpc::InsecureChannelCredentials(), args);
  }
  grpc::SslCredentialsOptions ssl;
  for (const auto& [flag, path, pem] :
       {std::tuple<const char*, const std::string&, std::string*>{
            "--tls_ca", options.tls_ca_file, &ssl.pem_root_certs},
        {"--tls_cert", options.tls_cert_file, &ssl.pem_cert_chain},
        {"--tls_key", options.tls_key_file, &ssl.pem_private_key}}) {
    if (path.empty()) continue;
    absl::StatusOr<std::string> contents = gateway::ReadPemFile(flag, path);
    if (!contents.ok()) {
      err << "blossom: error: " << contents.status().message() << std::endl;
      return nullptr;
    }
    *pem = *std::move(contents);
  }
  *ok = true;
  return grpc::CreateCustomChannel(options.server, grpc::SslCredentials(ssl), args);
}

// The channel to --server, or 2 (a usage error, printed) when there is none.
int Open(const RemoteOptions& options, std::ostream& err, std::shared_ptr<grpc::Channel>* channel) {
  if (options.server.empty()) {
    err << "blossom: error: --server host:port is required" << std::endl;
    return 2;
  }
  bool ok = false;
  *channel = Connect(options, err, &ok);
  return ok ? 0 : 2;
}

void Prepare(const RemoteOptions& options, grpc::ClientContext* context) {
  if (!options.api_key.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", options.api_key));
  }
  // 0 is no deadline, and so is anything past a century (infinity included): such a value
  // would overflow the clock's count and become a deadline in the past.
  constexpr double kNoDeadlineBeyondSeconds = 100.0 * 365 * 24 * 3600;
  if (options.timeout_seconds > 0 && options.timeout_seconds < kNoDeadlineBeyondSeconds) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(
                              options.timeout_seconds * 1000.0)));
  }
}

void PrintFinal(const v1::FinalInfo& final, std::ostream& err) {
  const v1::Timings& t = final.timings();
  err << absl::StrFormat(
             "[%s] finish_reason=%s prompt_tokens=%d generated_tokens=%d queue=%.1fms "
             "ttft=%.1fms total=%.1fms %.2f ms/token seed=%u",
             final.request_id(), FinishReasonText(final.finish_reason()),
             final.usage().prompt_tokens(), final.usage().generated_tokens(),
             1e3 * t.queue_seconds(), 1e3 * t.time_to_first_token_seconds(),
             1e3 * t.total_seconds(), 1e3 * t.time_per_output_token_seconds(), final.seed())
      << std::endl;
}

bool TakesText(const std::string& command) {
  return command == "generate" || command == "stream" || command == "tokenize";
}

}  // namespace

absl::StatusOr<std::string> ResolveApiKey(const std::string& flag, const std::string& file,
                                          const char* env) {
  if (!flag.empty() && !file.empty()) {
    return absl::InvalidArgumentError("give one of --api_key and --api_key_file");
  }
  if (!file.empty()) return gateway::ReadApiKeyFile("--api_key_file", file);
  const std::string key = !flag.empty() ? flag : env != nullptr ? env : "";
  if (key.empty()) return key;
  // gRPC aborts the process on metadata it cannot carry.
  absl::Status usable =
      gateway::CheckApiKey(flag.empty() ? kApiKeyEnvironmentVariable : "--api_key", key);
  if (!usable.ok()) return usable;
  return key;
}

int ResolveCommandLine(const CommandLineArguments& args, ResolvedCommand* resolved,
                       std::ostream& err) {
  if (args.positional.empty()) {
    err << "blossom: error: no command (generate, stream, tokenize, health, info)" << std::endl;
    return 2;
  }
  const std::string& command = args.positional[0];
  if (!TakesText(command) && command != "health" && command != "info") {
    err << "blossom: error: unknown command '" << command
        << "' (expected: generate, stream, tokenize, health, info)" << std::endl;
    return 2;
  }
  // Anything past what the command takes would be silently dropped (a prompt given as two
  // unquoted words, or as TEXT to health), so the run would not be the one asked for.
  const std::vector<std::string> extra(args.positional.begin() + 1, args.positional.end());
  const size_t allowed = TakesText(command) ? 1 : 0;
  if (extra.size() > allowed) {
    err << "blossom: error: '" << command << "' takes "
        << (allowed ? "one TEXT argument (quote a text of several words)" : "no arguments")
        << ", got " << extra.size() << ": '" << absl::StrJoin(extra, "' '") << "'" << std::endl;
    return 2;
  }
  std::string text = args.prompt;
  if (!extra.empty()) {
    if (!args.prompt.empty()) {
      err << "blossom: error: the text is given twice, as --prompt and as the argument '"
          << extra[0] << "' (give one)" << std::endl;
      return 2;
    }
    text = extra[0];
  }
  if (TakesText(command) && text.empty()) {
    err << "blossom: error: '" << command << "' needs the text: blossom " << command
        << " ... TEXT (or --prompt TEXT)" << std::endl;
    return 2;
  }
  if (!TakesText(command) && !args.prompt.empty()) {
    err << "blossom: error: --prompt does not apply to '" << command << "'" << std::endl;
    return 2;
  }
  if (args.num_beams < 0) {
    err << "blossom: error: --num_beams must be >= 0 (0 = no beam search), got "
        << args.num_beams << std::endl;
    return 2;
  }
  if (args.num_beams > 0 && command != "generate") {
    err << "blossom: error: --num_beams works with generate only" << std::endl;
    return 2;
  }
  if (args.num_beams == 0 && !args.beam_flags_set.empty()) {
    err << "blossom: error: --" << args.beam_flags_set[0]
        << " applies to beam search only: add --num_beams N (N > 0), or drop it" << std::endl;
    return 2;
  }
  resolved->command = command;
  resolved->text = std::move(text);
  return 0;
}

void PrintBeams(const v1::BeamSearchResponse& response, const std::string& prefix,
                bool token_ids, std::ostream& out) {
  for (int i = 0; i < response.beams_size(); ++i) {
    const v1::Beam& beam = response.beams(i);
    if (response.beams_size() > 1 || token_ids) {
      out << absl::StrFormat("# beam %d: score=%.6f cumulative_logprob=%.6f finish_reason=%s",
                             i + 1, beam.score(), beam.cumulative_logprob(),
                             FinishReasonText(beam.finish_reason()));
      if (token_ids) {
        out << " token_ids=";
        for (int t = 0; t < beam.tokens_size(); ++t) out << (t ? "," : "") << beam.tokens(t).id();
      }
      out << "\n";
    }
    out << prefix << beam.text() << "\n";
  }
  out << std::flush;
}

int RunRemoteBeamSearch(const RemoteOptions& options, const v1::BeamSearchRequest& request,
                        std::ostream& out, std::ostream& err) {
  std::shared_ptr<grpc::Channel> channel;
  if (int usage_error = Open(options, err, &channel)) return usage_error;
  auto stub = v1::Blossom::NewStub(channel);
  grpc::ClientContext context;
  Prepare(options, &context);
  v1::BeamSearchResponse response;
  grpc::Status status = stub->BeamSearch(&context, request, &response);
  if (!status.ok()) return Failed(status, err);
  PrintBeams(response, "", options.show_token_ids, out);
  if (!options.quiet) {
    err << absl::StrFormat(
               "[%s] beams=%d prompt_tokens=%d generated_tokens=%d steps=%d total=%.1fms",
               response.request_id(), response.beams_size(), response.usage().prompt_tokens(),
               response.usage().generated_tokens(), response.steps(),
               1e3 * response.total_seconds())
        << std::endl;
  }
  return 0;
}

int RunRemoteCommand(const std::string& command, const RemoteOptions& options,
                     const v1::GenerateRequest& request, std::ostream& out, std::ostream& err) {
  std::shared_ptr<grpc::Channel> channel;
  if (int usage_error = Open(options, err, &channel)) return usage_error;
  auto stub = v1::Blossom::NewStub(channel);
  grpc::ClientContext context;
  Prepare(options, &context);

  if (command == "generate") {
    v1::GenerateResponse response;
    grpc::Status status = stub->Generate(&context, request, &response);
    if (!status.ok()) return Failed(status, err);
    out << response.text() << std::endl;
    if (!options.quiet) PrintFinal(response.final(), err);
    return 0;
  }
  if (command == "stream") {
    std::unique_ptr<grpc::ClientReader<v1::GenerateStreamResponse>> reader =
        stub->GenerateStream(&context, v1::ToStreamRequest(request));
    v1::GenerateStreamResponse message;
    v1::FinalInfo final;
    bool any = false;  // a refused call writes nothing to `out`
    while (reader->Read(&message)) {
      any = true;
      out << message.text_delta() << std::flush;
      if (message.has_final()) final = message.final();
    }
    if (any) out << std::endl;
    grpc::Status status = reader->Finish();
    if (!status.ok()) return Failed(status, err);
    if (!options.quiet) PrintFinal(final, err);
    return 0;
  }
  if (command == "tokenize") {
    v1::TokenizeRequest tokenize;
    tokenize.set_text(request.text());
    v1::TokenizeResponse response;
    grpc::Status status = stub->Tokenize(&context, tokenize, &response);
    if (!status.ok()) return Failed(status, err);
    for (int i = 0; i < response.ids_size(); ++i) {
      out << response.ids(i) << "\t" << response.tokens(i) << "\n";
    }
    out << std::flush;
    return 0;
  }
  if (command == "info") {
    v1::ModelInfo info;
    grpc::Status status = stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
    if (!status.ok()) return Failed(status, err);
    std::string json;
    google::protobuf::util::JsonPrintOptions print;
    print.add_whitespace = true;
    print.always_print_primitive_fields = true;
    print.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(info, &json, print);
    out << json << std::flush;
    return 0;
  }
  if (command == "health") {
    auto health = grpc::health::v1::Health::NewStub(channel);
    grpc::health::v1::HealthCheckRequest check;
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status status = health->Check(&context, check, &response);
    if (!status.ok()) return Failed(status, err);
    out << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status())
        << std::endl;
    return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
  }
  err << "blossom: error: unknown command '" << command
      << "' (generate, stream, tokenize, health, info)" << std::endl;
  return 2;
}

}  // namespace blossom
