#include "benchmarks/http_sse_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace {

using Json = nlohmann::json;

// A blocking TCP connection with a per-operation progress timeout. Not thread-safe.
class Socket {
 public:
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  absl::Status Connect(const HttpTarget& target) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    const int rc = getaddrinfo(target.host.c_str(), std::to_string(target.port).c_str(), &hints,
                               &list);
    if (rc != 0) {
      return absl::UnavailableError(absl::StrCat("resolve ", target.host, ": ", gai_strerror(rc)));
    }
    int err = 0;
    for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
      fd_ = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd_ < 0) continue;
      if (connect(fd_, a->ai_addr, a->ai_addrlen) == 0) break;
      err = errno;
      close(fd_);
      fd_ = -1;
    }
    freeaddrinfo(list);
    if (fd_ < 0) return absl::UnavailableError(absl::StrCat("connect: ", std::strerror(err)));
    return absl::OkStatus();
  }
  absl::Status SendAll(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
      off += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }
  // Appends what arrives; false at EOF. An error on failure or timeout.
  absl::StatusOr<bool> Receive(std::string* out, int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    int rc;
    do {
      rc = poll(&p, 1, timeout_ms);
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) return absl::DeadlineExceededError("no data from the server in time");
    if (rc < 0) return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
    char buf[16384];
    ssize_t n;
    do {
      n = recv(fd_, buf, sizeof(buf), 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    out->append(buf, static_cast<size_t>(n));
    return n > 0;
  }

 private:
  int fd_ = -1;
};

// A response head plus a body reader that hands out decoded body bytes as they arrive.
class ResponseReader {
 public:
  ResponseReader(Socket* socket, int timeout_ms) : socket_(socket), timeout_ms_(timeout_ms) {}

  absl::Status ReadHead() {
    size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (buffer_.size() > (64 << 10)) return absl::InternalError("response head too large");
      auto more = socket_->Receive(&buffer_, timeout_ms_);
      if (!more.ok()) return more.status();
      if (!*more) return absl::UnavailableError("connection closed before the response head");
    }
    const std::string head = buffer_.substr(0, end);
    buffer_.erase(0, end + 4);
    std::vector<std::string> lines = absl::StrSplit(head, "\r\n");
    std::vector<std::string> status_line = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
    if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/1.") ||
        !absl::SimpleAtoi(status_line[1], &status_)) {
      return absl::InternalError(absl::StrCat("bad status line '", lines[0], "'"));
    }
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == std::string::npos) continue;
      const std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
      const std::string value(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
      if (name == "transfer-encoding" && absl::StrContains(absl::AsciiStrToLower(value), "chunked")) {
        chunked_ = true;
      } else if (name == "content-length") {
        int64_t n = 0;
        if (absl::SimpleAtoi(value, &n) && n >= 0) content_length_ = n;
      }
    }
    return absl::OkStatus();
  }
  int status() const { return status_; }

  // Next decoded body bytes into *out (replacing it); false at the end of the body.
  absl::StatusOr<bool> Next(std::string* out) {
    out->clear();
    while (out->empty()) {
      if (finished_) return false;
      if (buffer_.empty()) {
        auto more = socket_->Receive(&buffer_, timeout_ms_);
        if (!more.ok()) return more.status();
        if (!*more) {
          if (chunked_ || (content_length_ >= 0 && received_ < content_length_)) {
            return absl::UnavailableError("connection closed mid-body");
          }
          finished_ = true;  // read-to-close body
          return false;
        }
      }
      std::string raw;
      raw.swap(buffer_);
      if (chunked_) {
        if (!decoder_.Feed(raw, out)) return absl::InternalError("malformed chunked body");
        if (decoder_.done()) finished_ = true;
      } else if (content_length_ >= 0) {
        const size_t take =
            std::min<size_t>(raw.size(), static_cast<size_t>(content_length_ - received_));
        out->append(raw, 0, take);
        received_ += static_cast<int64_t>(take);
        if (received_ == content_length_) finished_ = true;
      } else {
        *out = std::move(raw);
      }
    }
    return true;
  }

 private:
  Socket* socket_;
  const int timeout_ms_;
  std::string buffer_;
  int status_ = 0;
  bool chunked_ = false;
  int64_t content_length_ = -1;
  int64_t received_ = 0;
  bool finished_ = false;
  ChunkedDecoder decoder_;
};

std::string BuildRequest(const HttpSseClientOptions& options, const std::string& path,
                         const std::string& body, bool stream) {
  std::string host = options.target.host;
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  std::string out = absl::StrCat("POST ", options.target.path_prefix, path, " HTTP/1.1\r\n",
                                 "Host: ", host, ":", options.target.port, "\r\n",
                                 "Content-Type: application/json\r\n",
                                 "Content-Length: ", body.size(), "\r\n",
                                 "Connection: close\r\n");
  if (stream) out += "Accept: text/event-stream\r\n";
  if (!options.api_key.empty()) absl::StrAppend(&out, "Authorization: Bearer ", options.api_key, "\r\n");
  absl::StrAppend(&out, "\r\n", body);
  return out;
}

// The error message inside a TGI ({"error": "..."}) or OpenAI ({"error": {"message"}}) body.
std::string ErrorText(const std::string& body) {
  Json j = Json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const Json& e = j["error"];
    if (e.is_string()) return e.get<std::string>();
    if (e.is_object() && e.contains("message") && e["message"].is_string()) {
      return e["message"].get<std::string>();
    }
  }
  return body.substr(0, 200);
}

}  // namespace

std::vector<std::string> SseParser::Feed(const std::string& bytes) {
  std::vector<std::string> events;
  for (char c : bytes) {
    if (c != '\n') {
      line_.push_back(c);
      continue;
    }
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_.empty()) {  // blank line: dispatch
      if (has_data_) events.push_back(std::move(data_));
      data_.clear();
      has_data_ = false;
    } else if (absl::StartsWith(line_, "data:")) {
      size_t start = 5;
      if (line_.size() > 5 && line_[5] == ' ') start = 6;
      if (has_data_) data_.push_back('\n');
      data_.append(line_, start, std::string::npos);
      has_data_ = true;
    }  // other fields (event:, id:, retry:, comments) carry nothing we measure
    line_.clear();
  }
  return events;
}

bool ChunkedDecoder::Feed(const std::string& bytes, std::string* out) {
  size_t i = 0;
  while (i < bytes.size() && state_ != State::kDone) {
    if (state_ == State::kData) {
      const size_t take = std::min(remaining_, bytes.size() - i);
      out->append(bytes, i, take);
      i += take;
      remaining_ -= take;
      if (remaining_ == 0) state_ = State::kDataEnd;
      continue;
    }
    const char c = bytes[i++];
    if (c != '\n') {
      line_.push_back(c);
      if (line_.size() > 4096) return false;
      continue;
    }
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    std::string line;
    line.swap(line_);
    if (state_ == State::kSize) {
      const std::string hex = line.substr(0, line.find(';'));  // drop chunk extensions
      size_t size = 0;
      if (hex.empty()) return false;
      for (char h : hex) {
        const int v = absl::ascii_isdigit(static_cast<unsigned char>(h))
                          ? h - '0'
                          : (absl::ascii_isxdigit(static_cast<unsigned char>(h))
                                 ? absl::ascii_tolower(static_cast<unsigned char>(h)) - 'a' + 10
                                 : -1);
        if (v < 0 || size > (SIZE_MAX >> 4)) return false;
        size = size * 16 + static_cast<size_t>(v);
      }
      remaining_ = size;
      state_ = size == 0 ? State::kTrailer : State::kData;
    } else if (state_ == State::kDataEnd) {
      if (!line.empty()) return false;
      state_ = State::kSize;
    } else if (state_ == State::kTrailer) {
      if (line.empty()) state_ = State::kDone;
    }
  }
  return true;
}

absl::StatusOr<HttpTarget> ParseHttpTarget(const std::string& target) {
  if (!absl::StartsWith(target, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat("--target '", target, "': expected http://..."));
  }
  std::string rest = target.substr(7);
  HttpTarget out;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    out.path_prefix = rest.substr(slash);
    rest = rest.substr(0, slash);
    while (!out.path_prefix.empty() && out.path_prefix.back() == '/') out.path_prefix.pop_back();
  }
  size_t colon = rest.rfind(':');
  if (!rest.empty() && rest[0] == '[') {  // [v6]:port
    const size_t close = rest.find(']');
    if (close == std::string::npos) return absl::InvalidArgumentError("bad IPv6 host in --target");
    out.host = rest.substr(1, close - 1);
    colon = rest.find(':', close);
  } else {
    out.host = rest.substr(0, colon);
  }
  if (colon != std::string::npos) {
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &out.port) || out.port <= 0 || out.port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("--target '", target, "': bad port"));
    }
  }
  if (out.host.empty()) return absl::InvalidArgumentError("--target has no host");
  return out;
}

absl::StatusOr<HttpApi> ParseHttpApi(const std::string& text) {
  if (text == "tgi") return HttpApi::kTgi;
  if (text == "openai") return HttpApi::kOpenAI;
  return absl::InvalidArgumentError(absl::StrCat("--http-api '", text, "': expected tgi or openai"));
}

HttpSseClient::HttpSseClient(HttpSseClientOptions options) : options_(std::move(options)) {
  const int threads = std::max(1, options_.threads);
  workers_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Worker(); });
}

HttpSseClient::~HttpSseClient() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void HttpSseClient::Worker() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

void HttpSseClient::Start(const LoadRequest& request, BenchClock::time_point epoch, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back([this, request, epoch, done = std::move(done)] {
      done(Exchange(request, epoch));
    });
  }
  cv_.notify_one();
}

std::string HttpSseClient::RequestBody(const LoadRequest& request) const {
  Json body;
  if (options_.api == HttpApi::kTgi) {
    body = {{"inputs", request.text},
            {"parameters",
             {{"max_new_tokens", request.max_new_tokens},
              {"do_sample", false},
              {"details", true},
              {"ignore_eos", true}}}};
  } else {
    body = {{"prompt", request.text},
            {"max_tokens", request.max_new_tokens},
            {"temperature", 0},
            {"stream", true},
            {"ignore_eos", true},
            {"stream_options", {{"include_usage", true}}}};
    if (!options_.model.empty()) body["model"] = options_.model;
  }
  // Invalid UTF-8 cannot occur (prompts are cut at token boundaries of valid text), but
  // replace rather than throw if it ever does.
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

RequestRecord HttpSseClient::Exchange(const LoadRequest& request, BenchClock::time_point epoch) {
  RequestRecord r;
  r.index = request.index;
  r.scheduled_s = request.scheduled_s;
  r.prompt_tokens = request.prompt_tokens;
  r.expected_output_tokens = request.max_new_tokens;
  const std::string path = options_.api == HttpApi::kTgi ? "/generate_stream" : "/v1/completions";
  const std::string wire = BuildRequest(options_, path, RequestBody(request), true);
  int32_t counted = 0, reported = -1;
  bool saw_end = false;  // TGI: an event with generated_text; OpenAI: [DONE]
  auto fail = [&](const std::string& error) {
    r.end_s = SecondsSince(epoch);
    r.success = false;
    r.error = error;
    r.output_tokens = counted;
    return r;
  };
  Socket socket;
  r.send_s = SecondsSince(epoch);
  if (absl::Status s = socket.Connect(options_.target); !s.ok()) {
    return fail(absl::StrCat("http connect: ", s.message()));
  }
  if (absl::Status s = socket.SendAll(wire); !s.ok()) {
    return fail(absl::StrCat("http send: ", s.message()));
  }
  ResponseReader reader(&socket, options_.timeout_ms);
  if (absl::Status s = reader.ReadHead(); !s.ok()) {
    return fail(absl::StrCat("http read: ", s.message()));
  }
  std::string bytes;
  if (reader.status() != 200) {
    std::string body;
    for (;;) {
      auto more = reader.Next(&bytes);
      if (!more.ok() || !*more || body.size() > 4096) break;
      body += bytes;
    }
    return fail(absl::StrCat("http ", reader.status(), ": ", ErrorText(body)));
  }
  SseParser parser;
  for (;;) {
    auto more = reader.Next(&bytes);
    if (!more.ok()) return fail(absl::StrCat("http read: ", more.status().message()));
    if (!*more) break;
    const double now = SecondsSince(epoch);
    for (const std::string& data : parser.Feed(bytes)) {
      if (data == "[DONE]") {
        saw_end = true;
        continue;
      }
      Json event = Json::parse(data, nullptr, false);
      if (!event.is_object()) return fail("http bad event: not a JSON object");
      if (event.contains("error") && !event["error"].is_null()) {
        return fail(absl::StrCat("http error event: ", ErrorText(data)));
      }
      bool token = false;
      if (options_.api == HttpApi::kTgi) {
        token = event.contains("token") && event["token"].is_object();
        const auto details = event.find("details");
        if (details != event.end() && details->is_object()) {
          if (details->contains("generated_tokens")) {
            reported = (*details)["generated_tokens"].get<int32_t>();
          }
          if (details->contains("input_length")) {
            r.prompt_tokens = (*details)["input_length"].get<int32_t>();
          }
        }
        const auto text = event.find("generated_text");
        if (text != event.end() && !text->is_null()) saw_end = true;
      } else {
        const auto choices = event.find("choices");
        token = choices != event.end() && choices->is_array() && !choices->empty();
        const auto usage = event.find("usage");
        if (usage != event.end() && usage->is_object()) {
          reported = (*usage).value("completion_tokens", -1);
          r.prompt_tokens = (*usage).value("prompt_tokens", r.prompt_tokens);
        }
      }
      if (token) {
        if (r.first_token_s < 0) r.first_token_s = now;
        r.token_times_s.push_back(now);
        ++counted;
      }
    }
  }
  r.end_s = SecondsSince(epoch);
  if (!saw_end) return fail("http truncated: the stream ended without its final event");
  r.output_tokens = reported >= 0 ? reported : counted;
  r.success = true;
  return r;
}

absl::StatusOr<Tokenized> HttpSseClient::Tokenize(const std::string& text) {
  const Json body = {{"inputs", text}, {"add_special_tokens", false}};
  Socket socket;
  if (absl::Status s = socket.Connect(options_.target); !s.ok()) return s;
  if (absl::Status s = socket.SendAll(BuildRequest(options_, "/tokenize", body.dump(), false));
      !s.ok()) {
    return s;
  }
  ResponseReader reader(&socket, options_.timeout_ms);
  if (absl::Status s = reader.ReadHead(); !s.ok()) return s;
  std::string all, bytes;
  for (;;) {
    auto more = reader.Next(&bytes);
    if (!more.ok()) return more.status();
    if (!*more) break;
    all += bytes;
  }
  if (reader.status() != 200) {
    return absl::UnavailableError(
        absl::StrCat("POST /tokenize: http ", reader.status(), ": ", ErrorText(all)));
  }
  Json json = Json::parse(all, nullptr, false);
  if (!json.is_array()) return absl::InternalError("POST /tokenize: expected a JSON array");
  Tokenized out;
  for (const Json& t : json) {
    if (!t.is_object() || !t.contains("id") || !t.contains("start") || !t.contains("stop")) {
      return absl::InternalError("POST /tokenize: tokens need id, start and stop");
    }
    out.ids.push_back(t["id"].get<int32_t>());
    out.spans.emplace_back(t["start"].get<int32_t>(), t["stop"].get<int32_t>());
  }
  return out;
}

}  // namespace blossom
