#include "server/http/http_parser.h"

#include <cctype>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/types/optional.h"

namespace blossom::http {
namespace {

bool IsTokenChar(char c) {
  if (absl::ascii_isalnum(static_cast<unsigned char>(c))) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-':
    case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsTokenChar(c)) return false;
  }
  return true;
}

// Field values may hold visible characters, spaces, tabs and obs-text, never other controls.
bool IsValidFieldValue(absl::string_view s) {
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if ((u < 0x20 && u != '\t') || u == 0x7f) return false;
  }
  return true;
}

// Whether a comma-separated header value contains `token` (case-insensitive).
bool HasToken(absl::string_view value, absl::string_view token) {
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(part), token)) return true;
  }
  return false;
}

}  // namespace

const std::string* Request::Header(absl::string_view lowercase_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lowercase_name) return &value;
  }
  return nullptr;
}

void RequestParser::Reset() {
  state_ = State::kHead;
  request_ = Request();
  body_remaining_ = 0;
  trailer_bytes_ = 0;
  keep_alive_ = true;
  expect_continue_ = false;
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

RequestParser::Result RequestParser::ParseHead(absl::string_view head) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  // lines[0] is the request line: METHOD SP request-target SP HTTP-version.
  std::vector<absl::string_view> parts = absl::StrSplit(lines[0], ' ');
  if (parts.size() != 3 || !IsToken(parts[0]) || parts[1].empty()) {
    return Fail(400, "malformed request line");
  }
  for (char c : parts[1]) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) return Fail(400, "malformed request target");
  }
  if (parts[2] == "HTTP/1.1") {
    request_.version_minor = 1;
  } else if (parts[2] == "HTTP/1.0") {
    request_.version_minor = 0;
  } else if (absl::StartsWith(parts[2], "HTTP/") && parts[2].size() == 8 &&
             absl::ascii_isdigit(parts[2][5]) && parts[2][6] == '.' &&
             absl::ascii_isdigit(parts[2][7])) {
    return Fail(505, "HTTP version not supported");
  } else {
    return Fail(400, "malformed HTTP version");
  }
  request_.method = std::string(parts[0]);
  request_.target = std::string(parts[1]);
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
      if (rest.empty() || path_start == 0) return Fail(400, "absolute request target without a host");
      std::string origin_form =
          path_start == absl::string_view::npos ? "/" : std::string(rest.substr(path_start));
      if (origin_form[0] == '?') origin_form.insert(0, "/");
      request_.target = std::move(origin_form);
    }
  }
  size_t q = request_.target.find('?');
  request_.path = request_.target.substr(0, q);
  if (q != std::string::npos) request_.query = request_.target.substr(q + 1);

  // A copy, not a pointer into headers: the vector reallocates as headers are added.
  absl::optional<std::string> content_length;
  bool chunked = false, has_te = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    if (line.empty()) continue;  // only the final split piece can be empty here
    if (line[0] == ' ' || line[0] == '\t') return Fail(400, "obsolete header line folding");
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) return Fail(400, "malformed header line");
    absl::string_view name = line.substr(0, colon);
    // No whitespace between name and colon (RFC 9112 5.1; a request smuggling vector).
    if (!IsToken(name)) return Fail(400, "malformed header name");
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (!IsValidFieldValue(value)) return Fail(400, "invalid character in header value");
    request_.headers.emplace_back(absl::AsciiStrToLower(name), std::string(value));
    const std::string& lname = request_.headers.back().first;
    const std::string& lvalue = request_.headers.back().second;
    if (lname == "content-length") {
      if (content_length && *content_length != lvalue) {
        return Fail(400, "conflicting Content-Length headers");
      }
      content_length = lvalue;
    } else if (lname == "transfer-encoding") {
      has_te = true;
      chunked = absl::EqualsIgnoreCase(lvalue, "chunked");
      if (!chunked) return Fail(501, "unsupported Transfer-Encoding");
    }
  }
  // A missing Host is accepted (RFC 9112 3.2 says 400), since hand-written clients omit it.
  // RFC 9112 6.1: Transfer-Encoding in an HTTP/1.0 message means the framing is faulty.
  if (has_te && request_.version_minor == 0) {
    return Fail(400, "Transfer-Encoding is not allowed in an HTTP/1.0 request");
  }
  if (content_length && has_te) {
    return Fail(400, "both Content-Length and Transfer-Encoding");
  }
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
    expect_continue_ = request_.version_minor == 1;
  }
  if (has_te) {
    state_ = State::kChunkSize;
    return Result::kHeadersComplete;
  }
  uint64_t length = 0;
  if (content_length) {
    if (content_length->empty() || content_length->size() > 18) {
      if (content_length->size() > 18 &&
          content_length->find_first_not_of("0123456789") == std::string::npos) {
        return Fail(413, "request body too large");
      }
      return Fail(400, "invalid Content-Length");
    }
    for (char c : *content_length) {
      if (!absl::ascii_isdigit(c)) return Fail(400, "invalid Content-Length");
    }
    if (!absl::SimpleAtoi(*content_length, &length)) return Fail(400, "invalid Content-Length");
  }
  if (length > limits_.max_body_bytes) return Fail(413, "request body too large");
  body_remaining_ = length;
  state_ = State::kBody;
  if (length == 0) expect_continue_ = false;
  return Result::kHeadersComplete;
}

RequestParser::Result RequestParser::Parse(std::string* buffer) {
  for (;;) {
    switch (state_) {
      case State::kHead: {
        // Tolerate empty lines before the request line (RFC 9112 2.2).
        size_t skip = 0;
        while (skip + 1 < buffer->size() && (*buffer)[skip] == '\r' && (*buffer)[skip + 1] == '\n') {
          skip += 2;
        }
        if (skip > 0) buffer->erase(0, skip);
        size_t end = buffer->find("\r\n\r\n");
        // Lines must end in CRLF; a bare LF would otherwise leave the head unterminated until a
        // timeout. Rejected (RFC 9112 2.2 allows that) rather than guessed at.
        const size_t scan_end = end == std::string::npos ? buffer->size() : end;
        for (size_t lf = buffer->find('\n'); lf != std::string::npos && lf < scan_end;
             lf = buffer->find('\n', lf + 1)) {
          if (lf == 0 || (*buffer)[lf - 1] != '\r') return Fail(400, "bare LF in request head");
        }
        if (end == std::string::npos) {
          if (buffer->size() > limits_.max_header_bytes) {
            return Fail(431, "request header fields too large");
          }
          return Result::kNeedMore;
        }
        if (end + 4 > limits_.max_header_bytes) {
          return Fail(431, "request header fields too large");
        }
        Result r = ParseHead(absl::string_view(*buffer).substr(0, end));
        buffer->erase(0, end + 4);
        return r;  // kHeadersComplete or kError
      }
      case State::kBody: {
        size_t take = std::min(body_remaining_, buffer->size());
        request_.body.append(*buffer, 0, take);
        buffer->erase(0, take);
        body_remaining_ -= take;
        if (body_remaining_ > 0) return Result::kNeedMore;
        state_ = State::kDone;
        expect_continue_ = false;
        return Result::kComplete;
      }
      case State::kChunkSize: {
        size_t eol = buffer->find("\r\n");
        if (eol == std::string::npos) {
          if (buffer->size() > 1024) return Fail(400, "malformed chunk size line");
          return Result::kNeedMore;
        }
        expect_continue_ = false;
        absl::string_view line = absl::string_view(*buffer).substr(0, eol);
        line = line.substr(0, line.find(';'));  // chunk extensions are ignored
        line = absl::StripTrailingAsciiWhitespace(line);
        if (line.empty() || line.size() > 15 ||
            line.find_first_not_of("0123456789abcdefABCDEF") != absl::string_view::npos) {
          return Fail(400, "malformed chunk size");
        }
        uint64_t size = std::stoull(std::string(line), nullptr, 16);
        buffer->erase(0, eol + 2);
        if (size > limits_.max_body_bytes - request_.body.size()) {
          return Fail(413, "request body too large");
        }
        if (size == 0) {
          state_ = State::kTrailers;
        } else {
          body_remaining_ = size;
          state_ = State::kChunkData;
        }
        break;
      }
      case State::kChunkData: {
        size_t take = std::min(body_remaining_, buffer->size());
        request_.body.append(*buffer, 0, take);
        buffer->erase(0, take);
        body_remaining_ -= take;
        if (body_remaining_ > 0) return Result::kNeedMore;
        state_ = State::kChunkDataEnd;
        break;
      }
      case State::kChunkDataEnd: {
        if (buffer->size() < 2) return Result::kNeedMore;
        if ((*buffer)[0] != '\r' || (*buffer)[1] != '\n') return Fail(400, "malformed chunk");
        buffer->erase(0, 2);
        state_ = State::kChunkSize;
        break;
      }
      case State::kTrailers: {
        // Trailer fields are read and dropped, up to an empty line.
        size_t eol = buffer->find("\r\n");
        if (eol == std::string::npos) {
          if (trailer_bytes_ + buffer->size() > limits_.max_header_bytes) {
            return Fail(431, "request trailer fields too large");
          }
          return Result::kNeedMore;
        }
        trailer_bytes_ += eol + 2;
        if (trailer_bytes_ > limits_.max_header_bytes) {
          return Fail(431, "request trailer fields too large");
        }
        buffer->erase(0, eol + 2);
        if (eol == 0) {
          state_ = State::kDone;
          return Result::kComplete;
        }
        break;
      }
      case State::kDone:
        return Result::kComplete;
      case State::kError:
        return Result::kError;
    }
  }
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
