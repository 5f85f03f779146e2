// Per-connection state shared by the HTTP server's I/O thread and the response writers of
// handler threads, and the serialisation of responses. Internal to //server/http:http_server.
#ifndef BLOSSOM_SERVER_HTTP_CONNECTION_H_
#define BLOSSOM_SERVER_HTTP_CONNECTION_H_

#include <sys/epoll.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/http/http_parser.h"
#include "server/http/http_server.h"

namespace blossom::http::internal {

// Unsent output above which WriteChunk blocks; writers wake again below half of it.
constexpr size_t kHighWater = 4 << 20;

inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A complete response that closes the connection.
std::string SerializeClosing(const Response& response);
// A text/plain error response that closes the connection.
std::string ErrorResponse(int status, absl::string_view message);

// One request/response exchange. Fields are guarded by the owning Connection's mu, except the
// ones marked immutable.
struct Exchange {
  enum class Phase { kIdle, kStreaming, kDone };
  Phase phase = Phase::kIdle;
  bool close_after = false;  // close the connection once the response is flushed
  bool http10 = false;       // immutable
  bool head = false;         // immutable: HEAD request, no body is sent
  bool on_close_done = false;
  std::function<void()> on_close;
};

struct Connection {
  Connection(uint64_t id, int fd, std::string peer, ParserLimits limits)
      : id(id), peer(std::move(peer)), fd(fd), parser(limits) {}

  const uint64_t id;
  const std::string peer;

  // I/O thread only.
  int fd;
  std::string in;
  RequestParser parser;
  std::shared_ptr<Exchange> current;  // the exchange in flight, if any
  bool reading = true;                // EPOLLIN registered
  bool writing = false;               // EPOLLOUT registered
  bool close_after_response = false;  // no further requests on this connection
  bool lingering = false;             // write side shut down; draining input until EOF
  bool peer_eof = false;              // the peer shut down its sending side; no more input
  uint32_t interest = EPOLLIN | EPOLLRDHUP;  // the registered epoll events
  int64_t linger_deadline = 0;
  int64_t last_activity = NowMs();
  int64_t head_start = 0;  // when the first byte of the request head being read arrived; 0: none
  int64_t body_start = 0;  // when the head of the request whose body is being read completed

  // Guarded by mu.
  std::mutex mu;
  std::condition_variable drained;  // signalled when unsent output falls low or on close
  std::string out;
  size_t out_offset = 0;
  int64_t last_write_progress = NowMs();
  bool closed = false;
};

// The wake-up channel shared by the I/O thread and every writer; outlives the server while a
// writer holds it, so late writer calls are harmless.
struct Loop {
  ~Loop() {
    if (event_fd >= 0) close(event_fd);
  }
  void Wake(std::shared_ptr<Connection> conn) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopped) return;
      dirty.push_back(std::move(conn));
    }
    uint64_t one = 1;
    ssize_t ignored = write(event_fd, &one, sizeof(one));
    (void)ignored;  // the counter saturating is fine: the I/O thread drains the whole list
  }

  int event_fd = -1;
  std::mutex mu;
  std::vector<std::shared_ptr<Connection>> dirty;  // guarded by mu
  bool stopped = false;                            // guarded by mu
};

// The ResponseWriter of one exchange on `conn`.
std::shared_ptr<ResponseWriter> MakeWriter(std::shared_ptr<Loop> loop,
                                           std::shared_ptr<Connection> conn,
                                           std::shared_ptr<Exchange> ex);

}  // namespace blossom::http::internal

#endif  // BLOSSOM_SERVER_HTTP_CONNECTION_H_
