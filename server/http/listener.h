// The listening side of http_server: opening the listening socket, and how many connections the
// process's file-descriptor limit lets the server hold. Internal to //server/http:http_server.
#ifndef BLOSSOM_SERVER_HTTP_LISTENER_H_
#define BLOSSOM_SERVER_HTTP_LISTENER_H_

#include <chrono>
#include <cstdint>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include "absl/status/status.h"

namespace blossom::http::internal {

// Resolves `host` (numeric port) and binds and listens on the first address that works.
// InvalidArgument if `host` does not resolve, Unavailable if no address could be bound.
// Call before the acceptor's io_context runs (not thread-safe with it).
absl::Status OpenListener(const std::string& host, int port, boost::asio::ip::tcp::acceptor* acceptor);

// The connections a process allowed `fd_limit` open files (RLIMIT_NOFILE; 0 = unlimited) can
// hold: max_connections, lowered to leave max(64, fd_limit / 8) descriptors for the rest of the
// process (listener, event loop, logs, gRPC channels, model files) and for the one connection
// accepted past the limit to be evicted or refused; at least 1. Beyond it accept() fails with
// EMFILE and clients wait in the backlog instead of getting a 503 or evicting an idle one.
int ConnectionCapForFdLimit(int max_connections, uint64_t fd_limit);

// The soft RLIMIT_NOFILE of this process; 0 if unlimited or unknown. Thread-safe.
uint64_t OpenFileLimit();

// ConnectionCapForFdLimit for this process's limit, logged when it lowers max_connections.
int MaxConnectionsWithinFdLimit(int max_connections);

// Failed accepts. After one (out of file descriptors: EMFILE, ENFILE; or of memory) the pending
// connection stays queued and the listening socket readable, so accepting again at once would
// spin the I/O thread: the server retries after kRetry (closing connections free descriptors),
// and logs the failures at most every kLogEvery, with how many there were.
// Not thread-safe: the I/O thread's.
class AcceptErrors {
 public:
  static constexpr std::chrono::milliseconds kRetry{50};
  static constexpr std::chrono::seconds kLogEvery{10};

  void Record(const boost::system::error_code& ec, size_t open_connections);

 private:
  int64_t count_ = 0;  // since the last log line
  std::chrono::steady_clock::time_point last_log_{};
  bool logged_ = false;
};

}  // namespace blossom::http::internal

#endif  // BLOSSOM_SERVER_HTTP_LISTENER_H_
