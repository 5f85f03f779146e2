// An HTTP/1.1 server on Boost.Asio (optionally over TLS) with Boost.Beast's request parser:
// keep-alive, pipelining, chunked streaming responses, limits checked before bodies are read,
// and disconnect notification for in-flight exchanges.
#ifndef BLOSSOM_SERVER_HTTP_HTTP_SERVER_H_
#define BLOSSOM_SERVER_HTTP_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/http/http_parser.h"

namespace blossom::http {

struct Response {
  int status = 200;
  // Content-Length, Transfer-Encoding and Connection are set by the server; others are sent as is.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

// Handle on one in-flight exchange (one request and its response).
// Thread-safe: any thread may call any method. It stays valid after the connection is gone
// (calls then return false). The response is either one Send() or StartStream(), any number
// of WriteChunk() or QueueChunk(), then EndStream(); out-of-order calls return false.
//
// Flow control: WriteChunk() blocks its thread while the connection's output is over 4 MiB, so
// it suits a thread of the handler's own. A caller that must never block (a gRPC callback
// thread, an event loop) uses QueueChunk(), which never waits, and asks OnWritable() when to
// produce the next chunk: one chunk at a time, so output stays within 4 MiB plus one chunk.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // Whole response with Content-Length; once.
  virtual bool Send(Response response) = 0;
  // Starts a chunked response (HTTP/1.0 peers: raw body, connection closed at the end).
  virtual bool StartStream(int status, std::vector<std::pair<std::string, std::string>> headers) = 0;
  // Queues one chunk. Blocks while more than 4 MiB of this connection's output is unsent
  // (back-pressure), until the peer drains it or goes away. False once the peer is gone.
  virtual bool WriteChunk(std::string data) = 0;
  // Queues one chunk without waiting, whatever the unsent output (the caller bounds it by
  // waiting for OnWritable() between chunks). False once the peer is gone.
  virtual bool QueueChunk(std::string data) = 0;
  // Runs `callback` once, when the connection can take more output: at once on the caller's
  // thread if at most 2 MiB (the low-water mark) is unsent or the connection is gone, else on
  // the I/O thread once the peer has read enough, or when the connection closes (the callback
  // then sees closed()). On the I/O thread it must be quick and must not block. Callbacks do
  // not replace one another: each runs once.
  virtual void OnWritable(std::function<void()> callback) = 0;
  virtual bool EndStream() = 0;
  // Runs at most once, when the peer closes/resets (or the server stops) before the response
  // completed, or at once (on the caller's thread) if that already happened. Runs on the I/O
  // thread otherwise, so it must be quick and must not block on the writer.
  virtual void OnClose(std::function<void()> callback) = 0;
  // Whether the connection is gone (peer closed, reset, timed out, or server stopped).
  virtual bool closed() const = 0;
};

using Handler = std::function<void(const Request&, std::shared_ptr<ResponseWriter>)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = ephemeral
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 1 << 20;
  int max_connections = 4096;
  // Connections from one address (IP) at once; a new one over this is refused with 503 (or, on
  // TLS, closed) while other addresses are served. 0 = no per-address limit.
  int max_connections_per_ip = 256;
  // PEM certificate chain and private key: when both are set, every connection is TLS
  // (1.2 or newer); when neither is, plain HTTP.
  std::string tls_cert_file;
  std::string tls_key_file;
  int handler_threads = 4;
  // A connection with no request in flight, no input and no output left to write, or whose
  // output made no progress (the peer read nothing), for this long is closed. A handler still
  // computing its response is never timed out here, nor a peer still reading a response.
  int idle_timeout_ms = 60000;
  // Whole-request deadlines, counted from the first byte of a request head and from the end of
  // the head, however the bytes trickle in (a slowloris defence: bytes do not reset them).
  // Answered with 408 and the connection closed.
  int header_timeout_ms = 10000;
  int body_timeout_ms = 30000;
  // Formats the server's own error responses (400, 408, 413, 417, 431, 501, 503, 505), e.g. as JSON
  // in an API's error shape. `target` is the request target when the request line was parsed,
  // else "". Runs on the I/O thread; must be quick and thread-safe. Default: text/plain.
  // Content-Length and "Connection: close" are added by the server.
  std::function<Response(int status, const std::string& message, const std::string& target)>
      error_response;
};

// Connections: at max_connections, a new connection evicts the connection with no request in
// flight and no response still being written that has waited longest (an unfinished head
// first, then idle keep-alive); only when every connection has a request in flight or a
// response still being written is the new one refused with 503. So slow or idle clients can
// never lock out a client that sends its request promptly. One address may hold at most
// max_connections_per_ip of them; past that its new connections are refused (503), so one
// client cannot take every slot. A refusal carries "Retry-After: 1" (the slots free up as
// connections end), added to error_response's answer when that has none. max_connections is lowered at Start (with a warning) to what
// the process's RLIMIT_NOFILE leaves room for; a failed accept (out of descriptors) is retried
// after 50 ms rather than at once.
//
// Half-close: a peer that sends a request and then shuts down its sending side still gets the
// response, then the connection closes. To tell that apart from a peer that closed completely
// (whose request should be cancelled), an HTTP/1.1 request whose response has not started gets
// an interim "100 Continue" when the peer's FIN arrives: a closed peer answers it with a reset,
// which closes the connection and runs OnClose. A FIN during a response that already started
// is taken as a disconnect. (After a FIN nothing is read; the reset is seen by a peek on each
// timeout sweep, within 250 ms, or by the next write failing.)
//
// Threading: one I/O thread runs the Asio io_context that owns every socket; handlers run on a
// pool of handler_threads workers, one request per connection at a time (pipelined requests
// are answered in order). Writers append to a per-connection buffer under its lock and post a
// flush to the I/O thread; only the I/O thread writes to sockets, asynchronously, one write in
// flight per connection.
// Thread-safe: port(), EndKeepAlive(), Drain() and Stop() may be called from any thread except
// a handler's own or the I/O thread's (EndKeepAlive() and Drain() wait on the I/O thread;
// Stop() joins both).
class Server {
 public:
  class Impl;

  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options,
                                                       Handler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  // The first step of a graceful shutdown, while a load balancer still sends requests here:
  // from its return every response closes its connection ("Connection: close"; a response
  // already streaming closes its connection when it ends, and idle keep-alive connections close
  // after their next response), so pooled clients move to another server, while new
  // connections are still accepted and served. Irreversible; Drain() does it too. Waits on the
  // I/O thread; a no-op after Stop().
  void EndKeepAlive();
  // For a graceful shutdown before Stop(): stops accepting new connections, makes every response
  // from now on (and every one in flight that has not started) close its connection, and waits
  // until no connection has an exchange in flight or output not yet written to its socket, or
  // until `deadline`; so Stop() does not cut off what clients were already sent in part (the end
  // of a stream, its terminating chunk). Idle and half-received connections do not hold it up.
  // OK when all is written; DeadlineExceeded (saying how many connections were left) at the
  // deadline; FailedPrecondition after Stop(). Stop() waits for a Drain() in progress.
  absl::Status Drain(absl::Time deadline);
  // Stops accepting, closes connections (writers see closed, OnClose runs), joins threads.
  // Idempotent; also run by the destructor. Requests queued but not started are dropped.
  void Stop();

 private:
  explicit Server(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace blossom::http

#endif  // BLOSSOM_SERVER_HTTP_HTTP_SERVER_H_
