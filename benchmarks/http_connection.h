// The transport under the benchmark's HTTP client (http_sse_client): one HTTP/1.1 exchange on a
// fresh TCP connection, every step of it (resolving the host, connecting, sending, reading the
// response) bounded by one per-request Deadline, so `--request-timeout` means the same as on
// gRPC: the whole request's deadline. A host that drops SYNs, a server that stops reading, or one
// that trickles bytes forever fails the request when its deadline passes, not after the kernel's
// ~2 minute connect timeout or never.
//
// Thread-safety: Deadline is a value; HostResolver is thread-safe; HttpConnection, ResponseReader
// and ChunkedDecoder are not (one exchange on one thread).
#ifndef BLOSSOM_BENCHMARKS_HTTP_CONNECTION_H_
#define BLOSSOM_BENCHMARKS_HTTP_CONNECTION_H_

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace blossom {

// When a request must be done by, on the steady clock; or none (wait as long as it takes).
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  static Deadline None() { return Deadline(); }
  // `seconds` from now; <= 0 = none (as gRPC's deadline_s and --request-timeout 0).
  static Deadline After(double seconds);

  bool none() const { return none_; }
  Clock::time_point at() const { return at_; }  // meaningless when none()
  bool expired() const { return !none_ && Clock::now() >= at_; }
  // A poll() timeout: the milliseconds left, rounded up so that a poll never returns just
  // before the deadline and spins; 0 once expired; -1 (wait forever) when none.
  int PollMs() const;

 private:
  bool none_ = true;
  Clock::time_point at_;
};

struct HttpTarget {
  std::string host;
  int port = 80;
  std::string path_prefix;  // "" or "/prefix" (no trailing slash)
};

// "http://host[:port][/prefix]".
absl::StatusOr<HttpTarget> ParseHttpTarget(const std::string& target);

// One resolved address of a target.
struct SocketAddress {
  int family = 0;
  socklen_t length = 0;
  sockaddr_storage address{};
};

// Resolves a target's host once and keeps the answer for every later request (a benchmark of
// thousands of requests should not measure DNS each time; the first lookup happens while
// prompts are built, before the clock starts). getaddrinfo has no timeout of its own, so the
// lookup runs on a helper thread and a caller stops waiting at its deadline (the helper, which
// owns what it writes, is left to finish on its own). A failed lookup is not kept: the next
// caller asks again.
class HostResolver {
 public:
  explicit HostResolver(HttpTarget target) : target_(std::move(target)) {}
  absl::StatusOr<std::shared_ptr<const std::vector<SocketAddress>>> Resolve(Deadline deadline);

 private:
  struct Lookup;
  const HttpTarget target_;
  std::mutex mu_;
  std::shared_ptr<const std::vector<SocketAddress>> addresses_;  // guarded by mu_
  std::shared_ptr<Lookup> lookup_;  // the lookup in flight, if any; guarded by mu_
};

// A non-blocking TCP connection whose every wait is bounded by a deadline. Errors:
// DeadlineExceeded when the deadline passed (the message says while doing what: "connecting",
// "sending the request", ...), Unavailable for anything else (the message is the system's).
class HttpConnection {
 public:
  HttpConnection() = default;
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;
  ~HttpConnection();

  // Tries each address in order until one connects.
  absl::Status Connect(const std::vector<SocketAddress>& addresses, Deadline deadline);
  absl::Status SendAll(const std::string& data, Deadline deadline);
  // Appends what arrives to *out; false at EOF.
  absl::StatusOr<bool> Receive(std::string* out, Deadline deadline);

 private:
  int fd_ = -1;
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

// A response head plus a body reader that hands out decoded body bytes as they arrive.
class ResponseReader {
 public:
  ResponseReader(HttpConnection* connection, Deadline deadline)
      : connection_(connection), deadline_(deadline) {}

  absl::Status ReadHead();
  int status() const { return status_; }
  // Next decoded body bytes into *out (replacing it); false at the end of the body.
  absl::StatusOr<bool> Next(std::string* out);

 private:
  HttpConnection* connection_;
  const Deadline deadline_;
  std::string buffer_;
  int status_ = 0;
  bool chunked_ = false;
  int64_t content_length_ = -1;
  int64_t received_ = 0;
  bool finished_ = false;
  ChunkedDecoder decoder_;
};

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_HTTP_CONNECTION_H_
