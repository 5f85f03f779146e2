// The gateway's generation routes: OpenAI completions and chat (one choice, a batch of
// choices, or their streams; use_beam_search through BeamSearch) and TGI generate (unary, stream, and the "/" compat route), each
// relayed to the server's Generate / GenerateStream (an OpenAI stream with
// continuous_usage_stats counts its prompts with Tokenize first). Routing, auth and the other
// routes are in gateway.cc.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "clients/gateway/api_errors.h"
#include "clients/gateway/beam_search.h"
#include "clients/gateway/gateway.h"
#include "clients/gateway/gateway_internal.h"
#include "clients/gateway/json_fields.h"
#include "clients/gateway/openai_api.h"
#include "clients/gateway/stream_call.h"
#include "clients/gateway/tgi_api.h"

namespace blossom::gateway {
namespace {

using http::Response;
using http::ResponseWriter;

const std::vector<std::pair<std::string, std::string>>& SseHeaders() {
  static const auto* headers = new std::vector<std::pair<std::string, std::string>>{
      {"Content-Type", "text/event-stream"},
      {"Cache-Control", "no-cache"},
      {"X-Accel-Buffering", "no"}};
  return *headers;
}

}  // namespace

void Gateway::UnaryGenerate(
    const http::Request& request, std::shared_ptr<ResponseWriter> writer, ApiFlavor flavor,
    const blossom::v1::GenerateRequest& grpc_request,
    std::function<Response(const blossom::v1::GenerateResponse&)> respond,
    std::function<absl::Status(absl::Status)> refine_error) {
  using Call = UnaryCall<blossom::v1::GenerateRequest, blossom::v1::GenerateResponse>;
  auto call = std::make_shared<Call>();
  call->request = grpc_request;
  SetupContext(request, options_.request_timeout, &call->context);
  std::weak_ptr<Call> weak = call;
  writer->OnClose([this, weak] {
    if (auto c = weak.lock()) {
      metrics_.RecordCancelled();
      c->context.TryCancel();
    }
  });
  const uint64_t tracked = TrackCall(call);
  stub_->async()->Generate(
      &call->context, &call->request, &call->response,
      [this, call, writer, flavor, tracked, respond = std::move(respond),
       refine_error = std::move(refine_error)](grpc::Status status) {
        absl::Status failure = BackendStatus(status);
        if (refine_error) failure = refine_error(std::move(failure));
        writer->Send(status.ok() ? respond(call->response) : ErrorResponse(flavor, failure));
        UntrackCancel(tracked);
        metrics_.AddInFlight(-1);
        CallFinished();
      });
}

void Gateway::HandleCompletions(const http::Request& request, std::shared_ptr<ResponseWriter> writer,
                                bool chat, const std::string& request_id) {
  const ApiFlavor flavor = chat ? ApiFlavor::kOpenAIChat : ApiFlavor::kOpenAI;
  absl::StatusOr<openai::CompletionRequest> parsed =
      chat ? openai::ParseChatRequest(request.body, options_.chat_template)
           : openai::ParseCompletionRequest(request.body);
  if (!parsed.ok()) {
    writer->Send(ErrorResponse(flavor, parsed.status()));
    return;
  }
  if (absl::Status served = TakeServedModel(parsed->request.mutable_model()); !served.ok()) {
    writer->Send(ErrorResponse(flavor, served));
    return;
  }
  LearnModelId(request);  // for this response and the next ones, if still unknown
  parsed->model = ModelName(parsed->model);
  parsed->request.set_request_id(request_id);
  const std::string id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", request_id);
  const int64_t created = UnixSeconds();
  metrics_.AddInFlight(1);
  CallStarted();

  for (size_t k = 0; k < parsed->batch.size(); ++k) {
    blossom::v1::GenerateRequest& one = parsed->batch[k];
    if (!options_.served_model_name.empty()) one.clear_model();
    one.set_request_id(absl::StrCat(request_id, "-", k));
  }
  if (parsed->beam_search) {
    HandleBeamSearchChoices(request, writer,
                            std::make_shared<openai::CompletionRequest>(std::move(*parsed)), id,
                            created, flavor);
    return;
  }
  if (!parsed->batch.empty() && !parsed->stream) {
    HandleCompletionBatch(request, writer,
                          std::make_shared<openai::CompletionRequest>(std::move(*parsed)), id,
                          created, flavor);
    return;
  }
  if (!parsed->stream) {
    auto req = std::make_shared<openai::CompletionRequest>(std::move(*parsed));
    UnaryGenerate(request, writer, flavor, req->request,
                  [req, id, created](const blossom::v1::GenerateResponse& response) {
                    return JsonResponse(200, openai::CompletionResponse(*req, response, id, created));
                  },
                  [req](absl::Status s) { return openai::NameConstraintField(*req, std::move(s)); });
    return;
  }

  // The encoder refers to the parsed request, so the lambdas keep both alive together.
  auto parsed_request = std::make_shared<openai::CompletionRequest>(std::move(*parsed));
  auto encoder = std::make_shared<openai::StreamEncoder>(*parsed_request, id, created);
  std::vector<blossom::v1::GenerateRequest> calls = parsed_request->batch;
  if (calls.empty()) calls.push_back(parsed_request->request);
  SseEncoder sse{[encoder] { return encoder->Start(); },
                 [encoder, parsed_request](int choice,
                                           const blossom::v1::GenerateStreamResponse& m) {
                   return encoder->OnMessage(m, choice);
                 },
                 [encoder](absl::string_view error_json) { return encoder->Error(error_json); },
                 [parsed_request](absl::Status s) {
                   return openai::NameConstraintField(*parsed_request, std::move(s));
                 }};
  if (!parsed_request->continuous_usage) {
    StreamAsSse(request, writer, flavor, std::move(calls), std::move(sse));
    return;
  }
  // continuous_usage_stats: every chunk's usage needs its prompt's token count, which the
  // stream's messages tell only at the end; so the prompts are counted first. `kept`: the
  // streams start after this handler returned, when `request` is gone.
  auto kept = std::make_shared<http::Request>(request);
  CountPromptTokens(request, writer, flavor, calls,
                    [this, kept, writer, flavor, calls, encoder,
                     sse = std::move(sse)](std::vector<int32_t> counts) mutable {
                      for (size_t k = 0; k < counts.size(); ++k) {
                        // The server keeps the last truncate_prompt_tokens of a longer prompt.
                        const int32_t keep = calls[k].truncate_prompt_tokens();
                        encoder->SetPromptTokens(static_cast<int>(k),
                                                 keep > 0 ? std::min(counts[k], keep) : counts[k]);
                      }
                      StreamAsSse(*kept, writer, flavor, std::move(calls), std::move(sse));
                    });
}

void Gateway::CountPromptTokens(const http::Request& request,
                                std::shared_ptr<ResponseWriter> writer, ApiFlavor flavor,
                                const std::vector<blossom::v1::GenerateRequest>& grpc_requests,
                                std::function<void(std::vector<int32_t>)> then) {
  using Call = UnaryCall<blossom::v1::TokenizeRequest, blossom::v1::TokenizeResponse>;
  struct Counting {
    std::vector<int32_t> counts;                  // per request; guarded by mu
    std::vector<std::shared_ptr<Call>> calls;     // fixed before the first call starts
    std::vector<std::vector<size_t>> counts_for;  // per call, fixed: the requests it counts
    std::mutex mu;
    size_t remaining = 0;  // guarded by mu
    grpc::Status failure;  // guarded by mu: the first call's failure
  };
  auto counting = std::make_shared<Counting>();
  counting->counts.assign(grpc_requests.size(), 0);
  for (size_t k = 0; k < grpc_requests.size(); ++k) {
    const blossom::v1::GenerateRequest& one = grpc_requests[k];
    if (!one.has_text()) {
      counting->counts[k] = one.token_ids().ids_size();
    } else if (k > 0 && grpc_requests[k - 1].has_text() &&
               grpc_requests[k - 1].text() == one.text()) {
      counting->counts_for.back().push_back(k);
    } else {
      auto call = std::make_shared<Call>();
      call->request.set_text(one.text());
      call->request.set_add_special_tokens(true);  // as Generate encodes a prompt
      SetupContext(request, options_.request_timeout, &call->context);
      counting->calls.push_back(std::move(call));
      counting->counts_for.push_back({k});
    }
  }
  if (counting->calls.empty()) {
    then(std::move(counting->counts));
    return;
  }
  counting->remaining = counting->calls.size();
  std::weak_ptr<Counting> weak = counting;
  const uint64_t tracked = TrackCancel([weak] {
    if (auto c = weak.lock()) {
      for (auto& call : c->calls) call->context.TryCancel();
    }
  });
  for (size_t i = 0; i < counting->calls.size(); ++i) {
    Call& call = *counting->calls[i];
    stub_->async()->Tokenize(
        &call.context, &call.request, &call.response,
        [this, counting, i, writer, flavor, tracked, then](grpc::Status status) {
          Counting& c = *counting;
          {
            std::lock_guard<std::mutex> lock(c.mu);
            if (!status.ok() && c.failure.ok()) c.failure = status;
            for (size_t k : c.counts_for[i]) c.counts[k] = c.calls[i]->response.ids_size();
            if (--c.remaining > 0) return;
          }
          UntrackCancel(tracked);
          if (c.failure.ok()) {
            then(std::move(c.counts));
            return;
          }
          writer->Send(ErrorResponse(flavor, BackendStatus(c.failure)));
          metrics_.AddInFlight(-1);
          CallFinished();
        });
  }
}

template <typename Req, typename Resp>
void Gateway::UnaryBatch(
    const http::Request& request, std::shared_ptr<ResponseWriter> writer, ApiFlavor flavor,
    const std::vector<Req>& requests, UnaryInvoke<Req, Resp> invoke,
    std::function<Response(std::vector<Resp>&)> respond,
    std::function<absl::Status(absl::Status)> refine_error) {
  using Call = UnaryCall<Req, Resp>;
  struct Batch {
    std::vector<std::shared_ptr<Call>> calls;  // fixed before the first call starts
    std::mutex mu;
    size_t remaining = 0;   // guarded by mu
    grpc::Status failure;   // guarded by mu: the first call's failure
  };
  auto batch = std::make_shared<Batch>();
  batch->remaining = requests.size();
  for (const Req& one : requests) {
    auto call = std::make_shared<Call>();
    call->request = one;
    SetupContext(request, options_.request_timeout, &call->context);
    batch->calls.push_back(std::move(call));
  }
  std::weak_ptr<Batch> weak = batch;
  writer->OnClose([this, weak] {
    if (auto b = weak.lock()) {
      metrics_.RecordCancelled();
      for (auto& call : b->calls) call->context.TryCancel();
    }
  });
  const uint64_t tracked = TrackCancel([weak] {
    if (auto b = weak.lock()) {
      for (auto& call : b->calls) call->context.TryCancel();
    }
  });
  for (auto& call : batch->calls) {
    invoke(&call->context, &call->request, &call->response,
           [this, batch, writer, flavor, respond, refine_error, tracked](grpc::Status status) {
             bool last = false, first_failure = false;
             {
               std::lock_guard<std::mutex> lock(batch->mu);
               if (!status.ok() && batch->failure.ok()) {
                 batch->failure = status;
                 first_failure = true;
               }
               last = --batch->remaining == 0;
             }
             // One failed call fails the request (as vLLM): the others stop now.
             if (first_failure) {
               for (auto& other : batch->calls) other->context.TryCancel();
             }
             if (!last) return;
             if (!batch->failure.ok()) {
               absl::Status failure = BackendStatus(batch->failure);
               if (refine_error) failure = refine_error(std::move(failure));
               writer->Send(ErrorResponse(flavor, failure));
             } else {
               std::vector<Resp> responses;
               responses.reserve(batch->calls.size());
               for (auto& done : batch->calls) responses.push_back(std::move(done->response));
               writer->Send(respond(responses));
             }
             UntrackCancel(tracked);
             metrics_.AddInFlight(-1);
             CallFinished();
           });
  }
}

void Gateway::HandleCompletionBatch(const http::Request& request,
                                    std::shared_ptr<ResponseWriter> writer,
                                    std::shared_ptr<openai::CompletionRequest> req, std::string id,
                                    int64_t created, ApiFlavor flavor) {
  using blossom::v1::GenerateRequest;
  using blossom::v1::GenerateResponse;
  UnaryBatch<GenerateRequest, GenerateResponse>(
      request, writer, flavor, req->batch,
      [this](grpc::ClientContext* context, const GenerateRequest* one, GenerateResponse* response,
             std::function<void(grpc::Status)> done) {
        stub_->async()->Generate(context, one, response, std::move(done));
      },
      [req, id, created](std::vector<GenerateResponse>& responses) {
        return JsonResponse(200, openai::CompletionResponse(*req, responses, id, created));
      },
      [req](absl::Status s) { return openai::NameConstraintField(*req, std::move(s)); });
}

void Gateway::HandleBeamSearchChoices(const http::Request& request,
                                      std::shared_ptr<ResponseWriter> writer,
                                      std::shared_ptr<openai::CompletionRequest> req,
                                      std::string id, int64_t created, ApiFlavor flavor) {
  using blossom::v1::BeamSearchRequest;
  using blossom::v1::BeamSearchResponse;
  UnaryBatch<BeamSearchRequest, BeamSearchResponse>(
      request, writer, flavor, openai::BeamSearchCalls(*req),
      [this](grpc::ClientContext* context, const BeamSearchRequest* one,
             BeamSearchResponse* response, std::function<void(grpc::Status)> done) {
        stub_->async()->BeamSearch(context, one, response, std::move(done));
      },
      [req, id, created](std::vector<BeamSearchResponse>& responses) {
        // Each prompt's beams are its n choices, best first.
        std::vector<blossom::v1::GenerateResponse> choices;
        for (const BeamSearchResponse& response : responses) {
          for (auto& choice : openai::BeamsAsChoices(response)) choices.push_back(std::move(choice));
        }
        if (req->batch.empty() && choices.size() == 1) {
          return JsonResponse(200, openai::CompletionResponse(*req, choices.front(), id, created));
        }
        return JsonResponse(200, openai::CompletionResponse(*req, choices, id, created));
      },
      nullptr);
}

void Gateway::HandleTgiGenerate(const http::Request& request, std::shared_ptr<ResponseWriter> writer,
                                bool stream, bool as_list, bool compat,
                                const std::string& request_id) {
  absl::StatusOr<tgi::GenerateRequest> parsed =
      tgi::ParseGenerateRequest(request.body, compat, stream);
  if (!parsed.ok()) {
    writer->Send(ErrorResponse(ApiFlavor::kTgi, parsed.status()));
    return;
  }
  parsed->request.set_request_id(request_id);
  metrics_.AddInFlight(1);
  CallStarted();

  if (!stream && parsed->best_of > 1) {
    // best_of candidates, sampled independently (no seed: the server draws one for each).
    auto req = std::make_shared<tgi::GenerateRequest>(std::move(*parsed));
    using blossom::v1::GenerateRequest;
    using blossom::v1::GenerateResponse;
    std::vector<GenerateRequest> candidates(static_cast<size_t>(req->best_of), req->request);
    for (size_t k = 0; k < candidates.size(); ++k) {
      candidates[k].set_request_id(absl::StrCat(request_id, "-", k));
      candidates[k].set_group_size(req->best_of);
    }
    UnaryBatch<GenerateRequest, GenerateResponse>(
        request, writer, ApiFlavor::kTgi, candidates,
        [this](grpc::ClientContext* context, const GenerateRequest* one, GenerateResponse* response,
               std::function<void(grpc::Status)> done) {
          stub_->async()->Generate(context, one, response, std::move(done));
        },
        [req, as_list](std::vector<GenerateResponse>& candidates) {
          Json body = tgi::BestOfResponse(*req, candidates);
          return JsonResponse(200, as_list ? Json::array({body}) : body);
        },
        nullptr);
    return;
  }
  if (!stream) {
    auto req = std::make_shared<tgi::GenerateRequest>(std::move(*parsed));
    UnaryGenerate(request, writer, ApiFlavor::kTgi, req->request,
                  [req, as_list](const blossom::v1::GenerateResponse& response) {
                    Json body = tgi::GenerateResponse(*req, response);
                    return JsonResponse(200, as_list ? Json::array({body}) : body);
                  });
    return;
  }

  auto parsed_request = std::make_shared<tgi::GenerateRequest>(std::move(*parsed));
  auto encoder = std::make_shared<tgi::StreamEncoder>(*parsed_request);
  StreamAsSse(request, writer, ApiFlavor::kTgi, {parsed_request->request},
              {[] { return std::string(); },
               [encoder, parsed_request](int, const blossom::v1::GenerateStreamResponse& m) {
                 return encoder->OnMessage(m);
               },
               [encoder](absl::string_view error_json) { return encoder->Error(error_json); }});
}

void Gateway::StreamAsSse(const http::Request& request, std::shared_ptr<ResponseWriter> writer,
                          ApiFlavor flavor, std::vector<blossom::v1::GenerateRequest> grpc_requests,
                          SseEncoder encoder) {
  // One GenerateStream call per choice, their messages relayed as they come. The callbacks of
  // different calls run concurrently: `mu` orders the encoder and the writes. Headers go out
  // with the first message, so a request refused by the server still gets a real HTTP status
  // instead of a 200 followed by an error event. The first failure ends the response (an error
  // response, or an error event after the headers) and cancels the other calls. AbortInFlight
  // ends it the same way (its calls fail CANCELLED, which BackendStatus turns into the
  // shutdown's 503).
  struct Shared {
    SseEncoder encoder;
    std::vector<std::shared_ptr<StreamCall>> calls;  // fixed before the first call starts
    uint64_t tracked = 0;                            // TrackCancel's id, as fixed
    std::mutex mu;
    bool started = false;  // guarded by mu
    bool ended = false;    // guarded by mu: the response is complete (or failed)
    size_t finals_left;    // guarded by mu: calls whose final message is still to come
    size_t calls_left;     // guarded by mu: calls not done
  };
  auto shared = std::make_shared<Shared>();
  shared->encoder = std::move(encoder);
  const std::string route_name = RouteName(request.path);  // the metrics' label
  shared->finals_left = shared->calls_left = grpc_requests.size();
  // Requires shared->mu.
  auto start_stream = [writer](Shared& sh) {
    if (sh.started) return true;
    sh.started = true;
    if (!writer->StartStream(200, SseHeaders())) return false;
    const std::string preamble = sh.encoder.preamble();
    return preamble.empty() || writer->QueueChunk(preamble);
  };
  auto cancel_all = [](Shared& sh) {
    for (auto& call : sh.calls) call->Cancel();
  };
  for (size_t k = 0; k < grpc_requests.size(); ++k) {
    const int choice = static_cast<int>(k);
    // Every write here queues without waiting (these run on gRPC's callback threads and on
    // the HTTP I/O thread); the output stays bounded because each call reads its next message
    // only once the connection is writable again (StreamCall's flow control).
    // (The lambdas hold `shared`, which holds the calls: StreamCall::OnDone drops both of its
    // lambdas, so the cycle ends with the last call.)
    auto on_message = [writer, start_stream, shared, choice](
                          const blossom::v1::GenerateStreamResponse& message) {
      Shared& sh = *shared;
      std::lock_guard<std::mutex> lock(sh.mu);
      if (sh.ended) return false;
      if (!start_stream(sh) || !writer->QueueChunk(sh.encoder.encode(choice, message))) {
        return false;
      }
      if (message.has_final() && --sh.finals_left == 0) {
        sh.ended = true;
        return writer->EndStream();
      }
      return true;
    };
    auto on_done = [this, flavor, writer, start_stream, cancel_all, shared, route_name](
                       const grpc::Status& status) {
      bool failed_now = false, last = false;
      {
        std::lock_guard<std::mutex> lock(shared->mu);
        if (!status.ok() && !shared->ended) {
          shared->ended = failed_now = true;
          absl::Status s = BackendStatus(status);
          if (shared->encoder.refine_error) s = shared->encoder.refine_error(std::move(s));
          if (!shared->started) {
            shared->started = true;
            writer->Send(ErrorResponse(flavor, s));
          } else if (writer->QueueChunk(
                         shared->encoder.encode_error(ErrorJson(flavor, s)))) {
            // Counted only when the event reached a client (a client that left gets none).
            metrics_.RecordStreamError(route_name, ShutDownStatus(status)
                                                       ? GatewayMetrics::StreamError::kShutdown
                                                       : GatewayMetrics::StreamError::kBackendError);
            writer->EndStream();
          }
        }
        last = --shared->calls_left == 0;
        if (last && !shared->ended) {
          // Every call ended well, though some sent no final message: end what was sent.
          shared->ended = true;
          start_stream(*shared);
          writer->EndStream();
        }
      }
      if (failed_now) cancel_all(*shared);
      if (last) {
        UntrackCancel(shared->tracked);
        metrics_.AddInFlight(-1);
        CallFinished();
      }
    };
    auto call = std::make_shared<StreamCall>(
        std::move(on_message),
        [writer](std::function<void()> resume) { writer->OnWritable(std::move(resume)); },
        std::move(on_done));
    SetupContext(request, options_.request_timeout, call->context());
    shared->calls.push_back(std::move(call));
  }
  std::weak_ptr<Shared> weak = shared;
  writer->OnClose([this, weak] {
    if (auto sh = weak.lock()) {
      metrics_.RecordCancelled();
      for (auto& call : sh->calls) call->Cancel();
    }
  });
  shared->tracked = TrackCancel([weak] {
    if (auto sh = weak.lock()) {
      for (auto& call : sh->calls) call->Cancel();
    }
  });
  for (size_t k = 0; k < grpc_requests.size(); ++k) {
    shared->calls[k]->Start(stub_.get(), grpc_requests[k]);
  }
}

}  // namespace blossom::gateway
