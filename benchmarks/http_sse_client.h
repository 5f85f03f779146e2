// LoadClient over HTTP/1.1 + server-sent events, for the HTTP gateway (or any TGI- or
// OpenAI-compatible server):
//   tgi (default): POST /generate_stream {"inputs", "parameters": {"max_new_tokens",
//                  "ignore_eos": true, "details": true}} -> `data:{"token": ...}` per token, the
//                  last event with "details" (generated_tokens, input_length)
//   openai:        POST /v1/completions {"prompt", "max_tokens", "stream": true,
//                  "ignore_eos": true, "temperature": 0, "stream_options": {"include_usage": true}}
//                  -> `data: {"choices": [...]}` per token, a usage event, `data: [DONE]`
// Both are greedy. Tokenize (for building prompts) uses TGI's POST /tokenize.
//
// Thread-per-request: a pool of `threads` workers (the driver's concurrency cap, so no request
// waits for a worker), each doing one blocking exchange on a fresh connection
// (`Connection: close`), which keeps the client simple and independent of keep-alive bugs.
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

// Incremental decoder of a chunked transfer-coded body. Not thread-safe.
class ChunkedDecoder {
 public:
  // Appends decoded bytes to *out; false on malformed input.
  bool Feed(const std::string& bytes, std::string* out);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone };
  State state_ = State::kSize;
  std::string line_;
  size_t remaining_ = 0;
};

enum class HttpApi { kTgi, kOpenAI };

struct HttpTarget {
  std::string host;
  int port = 80;
  std::string path_prefix;  // "" or "/prefix" (no trailing slash)
};

// "http://host[:port][/prefix]".
absl::StatusOr<HttpTarget> ParseHttpTarget(const std::string& target);
absl::StatusOr<HttpApi> ParseHttpApi(const std::string& text);

struct HttpSseClientOptions {
  HttpTarget target;
  HttpApi api = HttpApi::kTgi;
  std::string api_key;  // `Authorization: Bearer <key>` when set
  std::string model;    // OpenAI "model" ("" = omitted)
  int threads = 64;     // concurrent exchanges
  int timeout_ms = 600000;  // no progress on a socket for this long fails the request
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
  RequestRecord Exchange(const LoadRequest& request, BenchClock::time_point epoch);
  void Worker();

  const HttpSseClientOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_HTTP_SSE_CLIENT_H_
