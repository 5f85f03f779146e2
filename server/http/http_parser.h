// Incremental HTTP/1.1 request parsing over Boost.Beast's request_parser: Beast parses the
// message; this adapter adds the server's policy (stricter framing rules, status codes, the
// Request shape handlers see).
#ifndef BLOSSOM_SERVER_HTTP_HTTP_PARSER_H_
#define BLOSSOM_SERVER_HTTP_HTTP_PARSER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace blossom::http {

// One parsed request. Header names are lower-cased; values have surrounding whitespace trimmed.
struct Request {
  // target is in origin form ("/path?query"; an absolute-form target has its scheme and
  // authority removed); path has no query string; query is without '?'.
  std::string method, target, path, query;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string peer;  // "ip:port"
  int version_minor = 1;  // HTTP/1.<version_minor>

  // The first header with this (lower-case) name, or nullptr.
  const std::string* Header(absl::string_view lowercase_name) const;
};

struct ParserLimits {
  // The request head; also one chunk-size line, the trailers, and all chunk extensions.
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 1 << 20;
};

// Parses one request at a time out of a connection's input buffer, consuming what it used
// (bytes may arrive split anywhere). Limits are checked before the body is read: a head (request
// line, header lines and blank line, counted across calls) over max_header_bytes fails with 431
// as soon as that many bytes have arrived without its end, and a Content-Length over
// max_body_bytes fails with 413 as soon as the headers are complete. A chunked body's framing is
// bounded too (431): one chunk-size line, or the last chunk with its trailer fields, within
// max_header_bytes, and all chunk extensions together within max_header_bytes. On top of Beast
// it refuses, with 400: bare-LF line ends (at once, instead of waiting for a CRLF CRLF that
// never comes), obsolete line folding, Transfer-Encoding in HTTP/1.0, Content-Length with
// Transfer-Encoding, and absolute-form targets without a host; 501 for a Transfer-Encoding
// other than "chunked", 505 for an HTTP version other than 1.0/1.1, 417 for an Expect other
// than 100-continue. Not thread-safe: owned by one connection's I/O thread.
class RequestParser {
 public:
  enum class Result {
    kNeedMore,         // consumed what it could; feed more bytes
    kHeadersComplete,  // headers parsed and within limits; body not read yet (call Parse again)
    kComplete,         // request() holds a whole request; call Reset() before the next one
    kError,            // error_status()/error_message() say why; the connection must be closed
  };

  explicit RequestParser(ParserLimits limits);
  ~RequestParser();
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Consumes bytes from the front of *buffer.
  Result Parse(std::string* buffer);
  void Reset();

  Request& request() { return request_; }
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }
  // Whether the connection may stay open after this request (HTTP/1.1 default unless
  // "Connection: close"; HTTP/1.0 only with "Connection: keep-alive").
  bool keep_alive() const { return keep_alive_; }
  // The client sent "Expect: 100-continue" and the body has not arrived yet.
  bool expects_continue() const { return expect_continue_; }
  // The head is complete and the body (or a chunk of it) is still being read.
  bool reading_body() const { return state_ == State::kBody; }
  // Parse has seen bytes of a request head that is not complete yet; empty lines before a
  // request (which it skips) do not count, so they do not start a header deadline.
  bool in_head() const { return state_ == State::kHead && in_head_; }

 private:
  struct Beast;  // the Beast parser of the current request (keeps Beast out of this header)
  enum class State { kHead, kBody, kDone, kError };
  Result Fail(int status, std::string message);
  Result CheckHead();  // the server's rules on a head Beast accepted
  // Sets request_.target/path/query from Beast's target (absolute form routed by its path);
  // false if it is empty or an absolute form without a host.
  bool ParseTarget();

  const ParserLimits limits_;
  std::unique_ptr<Beast> beast_;
  State state_ = State::kHead;
  Request request_;
  bool keep_alive_ = true;
  bool expect_continue_ = false;
  bool body_taken_ = false;  // kDone: the body has been moved into request_
  // kHead: the lines Beast has taken from the buffer so far (it goes on after them); they count
  // against max_header_bytes and error messages look at them.
  std::string head_;
  bool in_head_ = false;  // kHead: see in_head()
  // kHead: empty lines skipped before this request. RFC 9112 2.2 asks servers to ignore "at
  // least one"; a client that sends nothing else would otherwise keep an idle connection alive
  // forever (each line resets the idle clock), so past kMaxEmptyLines it is a 400.
  int empty_lines_ = 0;
  static constexpr int kMaxEmptyLines = 16;
  int error_status_ = 0;
  std::string error_message_;
};

// The standard reason phrase for a status code ("OK", "Not Found", ...; "Unknown" otherwise).
const char* ReasonPhrase(int status);

}  // namespace blossom::http

#endif  // BLOSSOM_SERVER_HTTP_HTTP_PARSER_H_
