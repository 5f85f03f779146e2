#include "benchmarks/grpc_load_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace blossom {
namespace {

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

}  // namespace

// One GenerateStream call. Owns itself: deleted in OnDone *before* `done` runs, so that once the
// driver has seen every completion no reactor is left to be destroyed (a reactor destroyed on a
// gRPC thread while main() returns corrupts the heap). gRPC runs the callbacks of one reactor
// one at a time, so the record needs no lock.
class GrpcLoadClient::StreamReactor final
    : public grpc::ClientReadReactor<v1::GenerateStreamResponse> {
 public:
  StreamReactor(GrpcLoadClient* owner, const LoadRequest& request, BenchClock::time_point epoch,
                LoadClient::Done done)
      : owner_(owner), epoch_(epoch), done_(std::move(done)) {
    record_.index = request.index;
    record_.scheduled_s = request.scheduled_s;
    record_.prompt_tokens = request.prompt_tokens;
    record_.expected_output_tokens = request.max_new_tokens;
  }
  grpc::ClientContext* context() { return &context_; }

  void Go(v1::Blossom::Stub* stub, const v1::GenerateStreamRequest& request) {
    stub->async()->GenerateStream(&context_, &request, this);
    StartRead(&message_);
    record_.send_s = SecondsSince(epoch_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone follows
    const double now = SecondsSince(epoch_);
    if (message_.has_token()) {
      if (record_.first_token_s < 0) record_.first_token_s = now;
      record_.token_times_s.push_back(now);
      ++counted_tokens_;
    }
    if (message_.has_final()) {
      have_final_ = true;
      record_.output_tokens = message_.final().usage().generated_tokens();
      if (message_.final().usage().prompt_tokens() > 0) {
        record_.prompt_tokens = message_.final().usage().prompt_tokens();
      }
    }
    message_.Clear();
    StartRead(&message_);
  }

  void OnDone(const grpc::Status& status) override {
    record_.end_s = SecondsSince(epoch_);
    if (!have_final_) record_.output_tokens = counted_tokens_;
    record_.success = status.ok();
    if (!status.ok()) {
      record_.error = absl::StrCat("grpc ", CodeName(status.error_code()), ": ",
                                   status.error_message());
    }
    LoadClient::Done done = std::move(done_);
    RequestRecord record = std::move(record_);
    GrpcLoadClient* owner = owner_;
    delete this;
    owner->StreamFinished();  // the client may be destroyed from here on
    done(std::move(record));
  }

 private:
  GrpcLoadClient* const owner_;
  grpc::ClientContext context_;
  const BenchClock::time_point epoch_;
  LoadClient::Done done_;
  v1::GenerateStreamResponse message_;
  RequestRecord record_;
  int32_t counted_tokens_ = 0;
  bool have_final_ = false;
};

absl::StatusOr<std::string> GrpcAddressFromTarget(const std::string& target) {
  if (!absl::StartsWith(target, "grpc://") || target.size() <= 7) {
    return absl::InvalidArgumentError(
        absl::StrCat("--target '", target, "': expected grpc://HOST:PORT or http://HOST:PORT"));
  }
  std::string address = target.substr(7);
  while (!address.empty() && address.back() == '/') address.pop_back();
  return address;
}

GrpcLoadClient::GrpcLoadClient(GrpcLoadClientOptions options) : options_(std::move(options)) {
  grpc::ChannelArguments args;
  // Tokenizing a whole corpus (prompt building) can answer more than gRPC's 4 MB default.
  args.SetMaxReceiveMessageSize(-1);
  channel_ = grpc::CreateCustomChannel(options_.address, grpc::InsecureChannelCredentials(), args);
  stub_ = v1::Blossom::NewStub(channel_);
}

GrpcLoadClient::~GrpcLoadClient() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return streams_ == 0; });
}

void GrpcLoadClient::StreamFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--streams_ == 0) idle_.notify_all();
}

void GrpcLoadClient::Decorate(grpc::ClientContext* context) const {
  if (!options_.api_key.empty()) {
    context->AddMetadata("authorization", "Bearer " + options_.api_key);
  }
  if (options_.deadline_s > 0) {
    // Capped at ~3 years (as good as none) so the clock arithmetic cannot overflow.
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(
                              std::chrono::duration<double>(std::min(options_.deadline_s, 1e8))));
  }
}

void GrpcLoadClient::Start(const LoadRequest& request, BenchClock::time_point epoch, Done done) {
  v1::GenerateStreamRequest proto;
  if (!request.token_ids.empty()) {
    proto.mutable_token_ids()->mutable_ids()->Add(request.token_ids.begin(),
                                                  request.token_ids.end());
  } else {
    proto.set_text(request.text);
  }
  proto.mutable_sampling()->set_temperature(0.0f);
  proto.mutable_stopping()->set_max_new_tokens(request.max_new_tokens);
  proto.mutable_stopping()->set_ignore_eos(true);
  proto.set_model(options_.model);
  proto.set_request_id(absl::StrCat("bench-", request.index));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++streams_;
  }
  auto* reactor = new StreamReactor(this, request, epoch, std::move(done));
  Decorate(reactor->context());
  reactor->Go(stub_.get(), proto);
}

absl::StatusOr<Tokenized> GrpcLoadClient::Tokenize(const std::string& text) {
  grpc::ClientContext context;
  Decorate(&context);
  v1::TokenizeRequest request;
  request.set_text(text);
  request.set_add_special_tokens(false);
  v1::TokenizeResponse response;
  grpc::Status status = stub_->Tokenize(&context, request, &response);
  if (!status.ok()) {
    // The server's code is kept (gRPC's and absl's codes are the same numbers): prompt building
    // halves its pieces on OUT_OF_RANGE, a text longer than the server tokenizes at once.
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("Tokenize failed: grpc ", CodeName(status.error_code()), ": ",
                                     status.error_message()));
  }
  Tokenized out;
  out.ids.assign(response.ids().begin(), response.ids().end());
  for (const v1::Span& span : response.offsets()) out.spans.emplace_back(span.start(), span.end());
  // The server omits offsets when they would not be exact (a normalizer changed the text).
  if (out.spans.size() != out.ids.size()) out.spans.clear();
  return out;
}

absl::StatusOr<v1::ModelInfo> GrpcLoadClient::GetModelInfo() {
  grpc::ClientContext context;
  Decorate(&context);
  v1::ModelInfo info;
  grpc::Status status = stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("GetModelInfo failed: grpc ",
                                               CodeName(status.error_code()), ": ",
                                               status.error_message()));
  }
  return info;
}

}  // namespace blossom
