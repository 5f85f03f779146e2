#include "server/http/http_parser.h"

#include <algorithm>
#include <cstdint>
#include <functional>

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace blossom::http {

namespace beast_http = boost::beast::http;

struct RequestParser::Beast {
  explicit Beast(const ParserLimits& limits) : extension_bytes_left(limits.max_header_bytes) {
    parser.header_limit(static_cast<std::uint32_t>(
        std::min<size_t>(limits.max_header_bytes, UINT32_MAX)));
    parser.body_limit(limits.max_body_bytes);
    parser.on_chunk_header(on_chunk_header);
  }
  beast_http::request_parser<beast_http::string_body> parser;
  // Chunk extensions are consumed and dropped by Beast, unbounded; together they may take at
  // most max_header_bytes (clients practically never send any), so a body of tiny chunks with
  // large extensions cannot stream far more bytes than it delivers.
  size_t extension_bytes_left;
  std::function<void(std::uint64_t, boost::beast::string_view, boost::beast::error_code&)>
      on_chunk_header = [this](std::uint64_t, boost::beast::string_view extensions,
                               boost::beast::error_code& ec) {
        if (extensions.size() > extension_bytes_left) {
          ec = beast_http::error::header_limit;
          return;
        }
        extension_bytes_left -= extensions.size();
      };
};

namespace {

// Whether a comma-separated header value contains `token` (case-insensitive).
bool HasToken(absl::string_view value, absl::string_view token) {
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(part), token)) return true;
  }
  return false;
}

// The value of the first `name:` line of a raw head, or "" (for telling Beast's errors apart).
absl::string_view RawHeader(absl::string_view head, absl::string_view name) {
  for (absl::string_view line : absl::StrSplit(head, "\r\n")) {
    if (line.empty()) break;
    if (line.size() > name.size() && line[name.size()] == ':' &&
        absl::EqualsIgnoreCase(line.substr(0, name.size()), name)) {
      return absl::StripAsciiWhitespace(line.substr(name.size() + 1));
    }
  }
  return "";
}

}  // namespace

const std::string* Request::Header(absl::string_view lowercase_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lowercase_name) return &value;
  }
  return nullptr;
}

RequestParser::RequestParser(ParserLimits limits)
    : limits_(limits), beast_(std::make_unique<Beast>(limits_)) {}

RequestParser::~RequestParser() = default;

void RequestParser::Reset() {
  beast_ = std::make_unique<Beast>(limits_);  // a Beast parser reads one message
  state_ = State::kHead;
  request_ = Request();
  keep_alive_ = true;
  expect_continue_ = false;
  body_taken_ = false;
  head_.clear();
  in_head_ = false;
  empty_lines_ = 0;
  error_status_ = 0;
  error_message_.clear();
}

RequestParser::Result RequestParser::Fail(int status, std::string message) {
  state_ = State::kError;
  error_status_ = status;
  error_message_ = std::move(message);
  keep_alive_ = false;
  return Result::kError;
}

bool RequestParser::ParseTarget() {
  const auto& message = beast_->parser.get();
  request_.target.assign(message.target().data(), message.target().size());
  if (request_.target.empty()) return false;
  // Absolute form (RFC 9112 3.2.2: a server must accept it): "http://host/path?q" is routed
  // as "/path?q"; the authority is dropped (this server has one origin).
  if (request_.target[0] != '/') {
    absl::string_view target = request_.target;
    size_t scheme_end = target.find("://");
    absl::string_view scheme = target.substr(0, scheme_end);
    if (scheme_end != absl::string_view::npos &&
        (absl::EqualsIgnoreCase(scheme, "http") || absl::EqualsIgnoreCase(scheme, "https"))) {
      absl::string_view rest = target.substr(scheme_end + 3);
      size_t path_start = rest.find_first_of("/?");
      if (rest.empty() || path_start == 0) return false;
      std::string origin_form =
          path_start == absl::string_view::npos ? "/" : std::string(rest.substr(path_start));
      if (origin_form[0] == '?') origin_form.insert(0, "/");
      request_.target = std::move(origin_form);
    }
  }
  size_t q = request_.target.find('?');
  request_.path = request_.target.substr(0, q);
  if (q != std::string::npos) request_.query = request_.target.substr(q + 1);

  return true;
}

RequestParser::Result RequestParser::CheckHead() {
  const auto& message = beast_->parser.get();
  const int version = message.version();
  if (version != 10 && version != 11) return Fail(505, "HTTP version not supported");
  request_.version_minor = version % 10;
  request_.method.assign(message.method_string().data(), message.method_string().size());
  for (const auto& field : message) {
    const auto name = field.name_string();
    const auto value = field.value();
    request_.headers.emplace_back(
        absl::AsciiStrToLower(absl::string_view(name.data(), name.size())),
        std::string(absl::StripAsciiWhitespace(absl::string_view(value.data(), value.size()))));
  }
  if (!ParseTarget()) return Fail(400, "absolute request target without a host");

  // Beast refuses Content-Length with Transfer-Encoding and conflicting Content-Lengths; it
  // takes any Transfer-Encoding ending in chunked, and reads no body for other codings.
  if (const std::string* te = request_.Header("transfer-encoding")) {
    // RFC 9112 6.1: Transfer-Encoding in an HTTP/1.0 message means the framing is faulty.
    if (request_.version_minor == 0) {
      return Fail(400, "Transfer-Encoding is not allowed in an HTTP/1.0 request");
    }
    if (!absl::EqualsIgnoreCase(*te, "chunked")) return Fail(501, "unsupported Transfer-Encoding");
  }
  // A missing Host is accepted (RFC 9112 3.2 says 400), since hand-written clients omit it.
  const std::string* connection = request_.Header("connection");
  if (request_.version_minor == 0) {
    keep_alive_ = connection != nullptr && HasToken(*connection, "keep-alive");
  } else {
    keep_alive_ = connection == nullptr || !HasToken(*connection, "close");
  }
  if (const std::string* expect = request_.Header("expect")) {
    if (!absl::EqualsIgnoreCase(*expect, "100-continue")) {
      return Fail(417, "unsupported Expect");
    }
    const auto length = beast_->parser.content_length();
    expect_continue_ = request_.version_minor == 1 &&
                       (beast_->parser.chunked() || (length && *length > 0));
  }
  return Result::kHeadersComplete;
}

RequestParser::Result RequestParser::Parse(std::string* buffer) {
  boost::beast::error_code ec;
  switch (state_) {
    case State::kHead: {
      // Tolerate empty lines before the request line (RFC 9112 2.2); only before it: once Beast
      // has taken the request line, a leading CRLF is the blank line that ends the head.
      if (head_.empty()) {
        size_t skip = 0;
        while (skip + 1 < buffer->size() && (*buffer)[skip] == '\r' &&
               (*buffer)[skip + 1] == '\n') {
          skip += 2;
        }
        if (skip > 0) buffer->erase(0, skip);
        empty_lines_ += static_cast<int>(skip / 2);
        if (empty_lines_ > kMaxEmptyLines) {
          return Fail(400, "too many empty lines before the request line");
        }
        if (*buffer == "\r") {  // maybe another empty line
          in_head_ = false;
          return Result::kNeedMore;
        }
      }
      in_head_ = !head_.empty() || !buffer->empty();
      // Where the head's blank line starts in *buffer (scan_end) and where the head ends
      // (head_end, npos while incomplete). Beast takes whole lines, so head_ ends in a CRLF.
      size_t scan_end = buffer->size(), head_end = std::string::npos;
      if (!head_.empty() && absl::StartsWith(*buffer, "\r\n")) {
        scan_end = 0;
        head_end = 2;
      } else if (const size_t blank = buffer->find("\r\n\r\n"); blank != std::string::npos) {
        scan_end = blank;
        head_end = blank + 4;
      }
      // Lines must end in CRLF; a bare LF would otherwise leave the head unterminated until a
      // timeout. Rejected (RFC 9112 2.2 allows that) rather than guessed at.
      for (size_t lf = buffer->find('\n'); lf != std::string::npos && lf < scan_end;
           lf = buffer->find('\n', lf + 1)) {
        if (lf == 0 || (*buffer)[lf - 1] != '\r') return Fail(400, "bare LF in request head");
        // Beast unfolds obsolete line folding; RFC 9112 5.2 lets a server refuse it instead,
        // which leaves no doubt about where a header ends (a smuggling vector).
        if (lf + 1 < scan_end && ((*buffer)[lf + 1] == ' ' || (*buffer)[lf + 1] == '\t')) {
          return Fail(400, "obsolete header line folding");
        }
      }
      if (!head_.empty() && scan_end > 0 && ((*buffer)[0] == ' ' || (*buffer)[0] == '\t')) {
        return Fail(400, "obsolete header line folding");  // folds a line taken earlier
      }
      // Beast checks header_limit against the request line and the fields apart (a head of
      // twice the limit passes), so the whole head is counted here, across calls. Incomplete
      // at the limit, it can only end over it.
      const size_t head_bytes =
          head_.size() + (head_end == std::string::npos ? buffer->size() : head_end);
      if (head_end == std::string::npos ? head_bytes >= limits_.max_header_bytes
                                        : head_bytes > limits_.max_header_bytes) {
        (void)ParseTarget();  // for the error response, when the request line got that far
        return Fail(431, "request header fields too large");
      }
      const size_t used = beast_->parser.put(boost::asio::buffer(buffer->data(), buffer->size()), ec);
      if (ec == beast_http::error::need_more) {
        // Beast may have taken the request line and whole header lines even so, and goes on
        // from after them: they must not be fed again.
        head_.append(*buffer, 0, used);
        buffer->erase(0, used);
        return Result::kNeedMore;
      }
      if (ec) {
        (void)ParseTarget();  // for the error response, when the request line got that far
        const std::string head = head_ + *buffer;  // the lines taken by earlier calls too
        if (ec == beast_http::error::header_limit) {
          return Fail(431, "request header fields too large");
        }
        if (ec == beast_http::error::body_limit) return Fail(413, "request body too large");
        if (ec == beast_http::error::bad_version) {
          // Beast takes only HTTP/1.x; another well-formed "HTTP/d.d" is a version we do not
          // speak (505) rather than garbage (400).
          const absl::string_view line = absl::string_view(head).substr(0, head.find("\r\n"));
          const absl::string_view version = line.substr(line.rfind(' ') + 1);
          if (line.find(' ') != line.rfind(' ') && version.size() == 8 &&
              absl::StartsWith(version, "HTTP/") && absl::ascii_isdigit(version[5]) &&
              version[6] == '.' && absl::ascii_isdigit(version[7])) {
            return Fail(505, "HTTP version not supported");
          }
          return Fail(400, "malformed HTTP version");
        }
        if (ec == beast_http::error::bad_content_length) {
          const absl::string_view length = RawHeader(head, "content-length");
          if (length.size() > 18 && length.find_first_not_of("0123456789") == absl::string_view::npos) {
            return Fail(413, "request body too large");
          }
          return Fail(400, "invalid or conflicting Content-Length");
        }
        if (ec == beast_http::error::bad_transfer_encoding) {
          return Fail(400, RawHeader(head, "content-length").empty()
                               ? "malformed Transfer-Encoding"
                               : "both Content-Length and Transfer-Encoding");
        }
        if (ec == beast_http::error::bad_method) return Fail(400, "malformed request method");
        if (ec == beast_http::error::bad_target) return Fail(400, "malformed request line");
        if (ec == beast_http::error::bad_field) return Fail(400, "malformed header line");
        if (ec == beast_http::error::bad_value) return Fail(400, "invalid character in header value");
        return Fail(400, absl::StrCat("malformed request: ", ec.message()));
      }
      buffer->erase(0, used);
      head_.clear();
      in_head_ = false;
      Result r = CheckHead();
      if (r == Result::kError) return r;
      state_ = beast_->parser.is_done() ? State::kDone : State::kBody;
      return Result::kHeadersComplete;
    }
    case State::kBody: {
      // Beast consumes a body piece (or one chunk's framing) per call.
      while (!beast_->parser.is_done() && !buffer->empty()) {
        const size_t body_before = beast_->parser.get().body().size();
        const size_t used =
            beast_->parser.put(boost::asio::buffer(buffer->data(), buffer->size()), ec);
        buffer->erase(0, used);
        if (used > 0 && beast_->parser.chunked()) expect_continue_ = false;
        if (ec == beast_http::error::need_more) break;
        if (ec == beast_http::error::body_limit) return Fail(413, "request body too large");
        if (ec == beast_http::error::header_limit) {
          return Fail(431, "request chunk extensions too large");
        }
        if (ec) return Fail(400, absl::StrCat("malformed request body: ", ec.message()));
        // What a call took beyond body bytes is chunk framing: one chunk-size line with its
        // extensions, or the last chunk with the trailer fields, which Beast does not bound.
        if (used - (beast_->parser.get().body().size() - body_before) > limits_.max_header_bytes) {
          return Fail(431, "request chunk header or trailers too large");
        }
        if (used == 0) break;
      }
      if (!beast_->parser.is_done()) {
        // Body bytes and chunk data are always taken, so what is left is an unfinished
        // chunk-size line or trailer section (which Beast would buffer without limit).
        if (buffer->size() >= limits_.max_header_bytes) {
          return Fail(431, "request chunk header or trailers too large");
        }
        return Result::kNeedMore;
      }
      state_ = State::kDone;
      return Parse(buffer);
    }
    case State::kDone:
      expect_continue_ = false;
      if (!body_taken_) {
        request_.body = std::move(beast_->parser.get().body());
        body_taken_ = true;
      }
      return Result::kComplete;
    case State::kError:
      return Result::kError;
  }
  return Result::kError;
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

}  // namespace blossom::http
