#include "benchmarks/http_sse_client.h"

#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace blossom {
namespace {

using Json = nlohmann::json;

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

// At most `max_bytes` of `text`, cut before a UTF-8 continuation byte: a character split in two
// would be invalid UTF-8 in the report.
std::string Utf8Prefix(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

// The error message inside a TGI ({"error": "..."}) or OpenAI ({"error": {"message"}}) body;
// else the body's first 200 bytes (an HTML error page would swamp the report).
std::string ErrorText(const std::string& body) {
  Json j = Json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const Json& e = j["error"];
    if (e.is_string()) return e.get<std::string>();
    if (e.is_object() && e.contains("message") && e["message"].is_string()) {
      return e["message"].get<std::string>();
    }
  }
  return Utf8Prefix(body, 200);
}

// The count `object[key]` as a server reports it: nullopt when absent or null (TGI and OpenAI
// send null for what is not known yet); an error for anything but an integer in [0, 2^31), which
// nlohmann's get<int32_t> would throw on (a string, an object) or wrap (a float, a huge number).
absl::StatusOr<std::optional<int32_t>> CountField(const Json& object, const char* key,
                                                  const char* where) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  if (it->is_number_unsigned() &&
      it->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return static_cast<int32_t>(it->get<uint64_t>());
  }
  if (it->is_number_integer() && it->get<int64_t>() >= 0 &&
      it->get<int64_t>() <= std::numeric_limits<int32_t>::max()) {
    return static_cast<int32_t>(it->get<int64_t>());
  }
  const std::string value = it->dump(-1, ' ', false, Json::error_handler_t::replace);
  return absl::InvalidArgumentError(
      absl::StrCat(where, ".", key, " is ", Utf8Prefix(value, 40), ", not a count"));
}

void Fail(RequestRecord& r, BenchClock::time_point epoch, int32_t counted, std::string error) {
  r.end_s = SecondsSince(epoch);
  r.success = false;
  r.error = std::move(error);
  r.output_tokens = counted;
}

// What /tokenize must be, for the messages of a server that does not have it.
constexpr char kTokenizeNeeds[] =
    "blossom-bench cuts text prompts to exact token lengths with TGI's POST /tokenize "
    "{\"inputs\"} -> [{\"id\", \"start\", \"stop\"}, ...], which Blossom's gateway and TGI "
    "serve; an OpenAI-only server (vLLM, ...) cannot be the --target of an http:// run";

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

absl::StatusOr<HttpApi> ParseHttpApi(const std::string& text) {
  if (text == "tgi") return HttpApi::kTgi;
  if (text == "openai") return HttpApi::kOpenAI;
  return absl::InvalidArgumentError(absl::StrCat("--http-api '", text, "': expected tgi or openai"));
}

HttpSseClient::HttpSseClient(HttpSseClientOptions options)
    : options_(std::move(options)), resolver_(options_.target) {
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
  r.send_s = SecondsSince(epoch);
  int32_t counted = 0;
  // This runs on a worker thread: an exception escaping it would end the whole process.
  try {
    RunExchange(request, epoch, r, counted);
  } catch (const std::exception& e) {
    Fail(r, epoch, counted, absl::StrCat("http client error: ", e.what()));
  } catch (...) {
    Fail(r, epoch, counted, "http client error: unknown exception");
  }
  return r;
}

void HttpSseClient::RunExchange(const LoadRequest& request, BenchClock::time_point epoch,
                                RequestRecord& r, int32_t& counted) {
  const Deadline deadline = Deadline::After(options_.request_timeout_s);
  const std::string path = options_.api == HttpApi::kTgi ? "/generate_stream" : "/v1/completions";
  const std::string wire = BuildRequest(options_, path, RequestBody(request), true);
  int32_t reported = -1;
  bool saw_end = false;  // TGI: an event with generated_text; OpenAI: [DONE]
  auto fail = [&](std::string error) { Fail(r, epoch, counted, std::move(error)); };
  // `step` names the reason for anything but a timeout ("http connect: ...").
  auto fail_with = [&](const char* step, const absl::Status& s) {
    if (s.code() == absl::StatusCode::kDeadlineExceeded) {
      fail(absl::StrCat("http timeout: the request's ", options_.request_timeout_s,
                        " s deadline (--request-timeout) passed while ", s.message(),
                        counted > 0 ? absl::StrCat(" (", counted, " tokens received)") : ""));
    } else {
      fail(absl::StrCat("http ", step, ": ", s.message()));
    }
  };
  auto addresses = resolver_.Resolve(deadline);
  if (!addresses.ok()) return fail_with("connect", addresses.status());
  HttpConnection connection;
  if (absl::Status s = connection.Connect(**addresses, deadline); !s.ok()) {
    return fail_with("connect", s);
  }
  if (absl::Status s = connection.SendAll(wire, deadline); !s.ok()) return fail_with("send", s);
  ResponseReader reader(&connection, deadline);
  if (absl::Status s = reader.ReadHead(); !s.ok()) return fail_with("read", s);
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
  // A count of the wrong type is the server's bug: the request fails with it named.
  auto read_count = [&](const Json& object, const char* key, const char* where, int32_t* into) {
    absl::StatusOr<std::optional<int32_t>> v = CountField(object, key, where);
    if (!v.ok()) {
      fail(absl::StrCat("http bad event: ", v.status().message()));
      return false;
    }
    if (v->has_value()) *into = **v;
    return true;
  };
  SseParser parser;
  for (;;) {
    auto more = reader.Next(&bytes);
    if (!more.ok()) return fail_with("read", more.status());
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
          if (!read_count(*details, "generated_tokens", "details", &reported) ||
              !read_count(*details, "input_length", "details", &r.prompt_tokens)) {
            return;
          }
        }
        const auto text = event.find("generated_text");
        if (text != event.end() && !text->is_null()) saw_end = true;
      } else {
        const auto choices = event.find("choices");
        token = choices != event.end() && choices->is_array() && !choices->empty();
        const auto usage = event.find("usage");
        if (usage != event.end() && usage->is_object()) {
          if (!read_count(*usage, "completion_tokens", "usage", &reported) ||
              !read_count(*usage, "prompt_tokens", "usage", &r.prompt_tokens)) {
            return;
          }
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
}

absl::StatusOr<Tokenized> HttpSseClient::Tokenize(const std::string& text) {
  try {
    return TokenizeOrThrow(text);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("POST /tokenize: ", e.what()));
  }
}

absl::StatusOr<Tokenized> HttpSseClient::TokenizeOrThrow(const std::string& text) {
  const Deadline deadline = Deadline::After(options_.request_timeout_s);
  auto failed = [&](const char* step, const absl::Status& s) {
    if (s.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(
          absl::StrCat("POST /tokenize: the request's ", options_.request_timeout_s,
                       " s deadline (--request-timeout) passed while ", s.message()));
    }
    return absl::Status(s.code(), absl::StrCat("POST /tokenize: ", step, ": ", s.message()));
  };
  const Json body = {{"inputs", text}, {"add_special_tokens", false}};
  auto addresses = resolver_.Resolve(deadline);
  if (!addresses.ok()) return failed("connect", addresses.status());
  HttpConnection connection;
  if (absl::Status s = connection.Connect(**addresses, deadline); !s.ok()) {
    return failed("connect", s);
  }
  const std::string wire = BuildRequest(
      options_, "/tokenize", body.dump(-1, ' ', false, Json::error_handler_t::replace), false);
  if (absl::Status s = connection.SendAll(wire, deadline); !s.ok()) return failed("send", s);
  ResponseReader reader(&connection, deadline);
  if (absl::Status s = reader.ReadHead(); !s.ok()) return failed("read", s);
  std::string all, bytes;
  for (;;) {
    auto more = reader.Next(&bytes);
    if (!more.ok()) return failed("read", more.status());
    if (!*more) break;
    all += bytes;
  }
  if (reader.status() == 404 || reader.status() == 405) {
    return absl::FailedPreconditionError(
        absl::StrCat("POST /tokenize: http ", reader.status(), " (", ErrorText(all),
                     "): the server has no TGI-style /tokenize; ", kTokenizeNeeds));
  }
  // A refusal of the text itself (TGI: 422; Blossom's gateway: 422 or 413) is most likely its
  // length, so it is OUT_OF_RANGE, on which prompt building halves its pieces.
  if (reader.status() == 400 || reader.status() == 413 || reader.status() == 422) {
    return absl::OutOfRangeError(
        absl::StrCat("POST /tokenize: http ", reader.status(), ": ", ErrorText(all)));
  }
  if (reader.status() != 200) {
    return absl::UnavailableError(
        absl::StrCat("POST /tokenize: http ", reader.status(), ": ", ErrorText(all)));
  }
  const Json json = Json::parse(all, nullptr, false);
  bool tgi_shape = json.is_array();
  Tokenized out;
  for (size_t i = 0; tgi_shape && i < json.size(); ++i) {
    const Json& t = json[i];
    if (!t.is_object()) {
      tgi_shape = false;
      break;
    }
    const auto id = CountField(t, "id", "token");
    const auto start = CountField(t, "start", "token");
    const auto stop = CountField(t, "stop", "token");
    if (!id.ok() || !start.ok() || !stop.ok() || !id->has_value() || !start->has_value() ||
        !stop->has_value() || **stop < **start) {
      tgi_shape = false;
      break;
    }
    out.ids.push_back(**id);
    out.spans.emplace_back(**start, **stop);
  }
  if (!tgi_shape) {
    return absl::FailedPreconditionError(absl::StrCat(
        "POST /tokenize answered 200 but not with a list of {\"id\", \"start\", \"stop\"} tokens "
        "(it began '",
        Utf8Prefix(all, 80), "'); ", kTokenizeNeeds));
  }
  return out;
}

}  // namespace blossom
