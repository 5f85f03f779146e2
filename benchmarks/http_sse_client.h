// LoadClient over HTTP/1.1 + server-sent events, for Blossom's HTTP gateway or TGI. Not for an
// OpenAI-only server (vLLM, ...): text prompts are cut to exact token lengths with TGI's
// `POST /tokenize {"inputs"}`, which must answer each token's byte span
// (`[{"id", "start", "stop"}, ...]`); a server without it fails prompt building with an error
// that says so. Generation speaks either API:
//   tgi (default): POST /generate_stream {"inputs", "parameters": {"max_new_tokens",
//                  "ignore_eos": true, "details": true}} -> `data:{"token": ...}` per token, the
//                  last event with "details" (generated_tokens, input_length)
//   openai:        POST /v1/completions {"prompt", "max_tokens", "stream": true,
//                  "ignore_eos": true, "temperature": 0, "stream_options": {"include_usage": true}}
//                  -> `data: {"choices": [...]}` per token, a usage event, `data: [DONE]`
// Both are greedy.
//
// Thread-per-request: a pool of `threads` workers (the driver's concurrency cap, so no request
// waits for a worker), each doing one blocking exchange on a fresh connection
// (`Connection: close`), which keeps the client simple and independent of keep-alive bugs.
// Each exchange (and each Tokenize call) has one deadline, `request_timeout_s` after it starts,
// bounding the connect, the send and every read (http_connection.h). A reply the client cannot
// use (a field of the wrong type, anything that throws) fails that request with a reason; it
// never ends the process.
//
// Thread-safety: Start and Tokenize may be called from any thread; the destructor joins the
// workers after the queue drains.
#ifndef BLOSSOM_BENCHMARKS_HTTP_SSE_CLIENT_H_
#define BLOSSOM_BENCHMARKS_HTTP_SSE_CLIENT_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/http_connection.h"
#include "benchmarks/load_client.h"

namespace blossom {

// Incremental SSE framing: feed bytes, get each event's data (its `data:` lines joined by
// "\n"; one optional space after the colon dropped, as the SSE spec says). Accepts \n and
// \r\n line ends. Not thread-safe.
class SseParser {
 public:
  std::vector<std::string> Feed(const std::string& bytes);

 private:
  std::string line_;
  std::string data_;
  bool has_data_ = false;
};

enum class HttpApi { kTgi, kOpenAI };

absl::StatusOr<HttpApi> ParseHttpApi(const std::string& text);

struct HttpSseClientOptions {
  HttpTarget target;
  HttpApi api = HttpApi::kTgi;
  std::string api_key;  // `Authorization: Bearer <key>` when set
  std::string model;    // OpenAI "model" ("" = omitted)
  int threads = 64;     // concurrent exchanges
  // The whole exchange's deadline (connect, send, the last byte of the stream), as gRPC's
  // deadline: a request not done this long after it started fails as "http timeout". 0 = none.
  double request_timeout_s = 600;
};

class HttpSseClient final : public LoadClient {
 public:
  explicit HttpSseClient(HttpSseClientOptions options);
  ~HttpSseClient() override;

  void Start(const LoadRequest& request, BenchClock::time_point epoch, Done done) override;
  absl::StatusOr<Tokenized> Tokenize(const std::string& text) override;
  bool SupportsTokenIds() const override { return false; }

  // The JSON body sent for `request` (exposed for tests).
  std::string RequestBody(const LoadRequest& request) const;

 private:
  // Never throws: whatever goes wrong is the record's error.
  RequestRecord Exchange(const LoadRequest& request, BenchClock::time_point epoch);
  // Exchange's body; may throw (a bad reply), which Exchange turns into the record's failure.
  void RunExchange(const LoadRequest& request, BenchClock::time_point epoch, RequestRecord& r,
                   int32_t& counted);
  absl::StatusOr<Tokenized> TokenizeOrThrow(const std::string& text);
  void Worker();

  const HttpSseClientOptions options_;
  HostResolver resolver_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_HTTP_SSE_CLIENT_H_
