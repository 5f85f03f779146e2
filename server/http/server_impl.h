// The state and I/O-thread logic behind http::Server, declared once for its two source files:
// http_server.cc (the server's life: start, accept and refuse, keep-alive's end, drain, stop,
// the timeout sweep) and connection_io.cc (one connection's exchanges: read, parse, dispatch to
// a handler, flush, close). Internal to //server/http:http_server.
#ifndef BLOSSOM_SERVER_HTTP_SERVER_IMPL_H_
#define BLOSSOM_SERVER_HTTP_SERVER_IMPL_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/http/connection.h"
#include "server/http/eviction.h"
#include "server/http/http_server.h"
#include "server/http/listener.h"
#include "server/http/tls_context.h"
#include "server/http/worker_pool.h"

namespace blossom::http {

// The public methods are Server's (same contract); the private ones run on the I/O thread.
class Server::Impl {
 public:
  using Tcp = boost::asio::ip::tcp;
  using ConnectionPtr = std::shared_ptr<internal::Connection>;

  Impl(const ServerOptions& options, Handler handler)
      : options_(options),
        handler_(std::move(handler)),
        loop_(std::make_shared<internal::Loop>()),
        acceptor_(*io_),
        accept_timer_(*io_),
        sweep_timer_(*io_) {}
  ~Impl() { Stop(); }

  absl::Status Init();
  int port() const { return port_; }
  void EndKeepAlive();
  absl::Status Drain(absl::Time deadline);
  void Stop();

 private:
  // http_server.cc.

  // Stops accepting and closes every connection (OnClose runs). io_->run() then returns once the
  // aborted operations have completed, so no handler (and no connection it holds) is left queued.
  void Shutdown();
  // Stops accepting, and keep-alive.
  void StartDraining();
  // From now on every response closes its connection, and so does every exchange in flight (with
  // "Connection: close" if its response has not started, else once it ends).
  void StopKeepAlive();
  // Connections with an exchange in flight or output not yet written.
  size_t BusyConnections();
  // The server's own error responses, through options_.error_response when set; the second one
  // serialized to close the connection.
  Response ProtocolErrorResponse(int status, const std::string& message,
                                 const std::string& target);
  std::string ProtocolError(int status, const std::string& message, const std::string& target);
  void ArmSweep();
  void Sweep();
  // Refuses a connection before it is served: a 503 that invites a retry, since slots free up
  // as connections end (TLS peers, which could not read it before a handshake, are just
  // closed). No request was read, so error_response gets no target.
  void Refuse(Tcp::socket& socket, const std::string& message);
  void Accept();
  // The per-address and total caps (evicting a waiting connection at the total), then the TLS
  // handshake or the first read.
  void OnAccept(Tcp::socket socket);

  // connection_io.cc.

  bool WantsInput(const ConnectionPtr& conn) const;
  void StartRead(const ConnectionPtr& conn);
  // The peer shut down its sending side (see "Half-close" in http_server.h).
  void OnPeerEof(const ConnectionPtr& conn);
  // Parses what arrived and dispatches complete requests, one in flight at a time.
  void ProcessInput(const ConnectionPtr& conn);
  void Dispatch(const ConnectionPtr& conn);
  // Hands queued output to the socket (one asynchronous write at a time); when the current
  // response is complete and flushed, moves on to the next pipelined request or closes.
  void FlushAndAdvance(const ConnectionPtr& conn);
  // Writes the rest of conn->sending; one write in flight per connection.
  void WriteSome(const ConnectionPtr& conn);
  void Close(const ConnectionPtr& conn);

  const ServerOptions options_;
  const Handler handler_;
  const std::shared_ptr<internal::Loop> loop_;
  // Shared with every connection (whose sockets must not outlive it; a writer can keep a
  // connection after the server is gone). Declared before the I/O objects here.
  const std::shared_ptr<boost::asio::io_context> io_ =
      std::make_shared<boost::asio::io_context>(1);
  Tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_timer_;  // the pause after a failed accept
  boost::asio::steady_timer sweep_timer_;
  std::unique_ptr<internal::TlsContextSource> tls_;  // null for plain HTTP
  bool use_tls_ = false;
  int port_ = 0;
  std::thread io_thread_;
  std::unique_ptr<internal::WorkerPool> workers_;
  std::mutex stop_mu_;
  bool stopped_ = false;  // guarded by stop_mu_

  // I/O thread only.
  internal::ConnectionMap conns_;
  std::unordered_map<std::string, int> connections_per_ip_;
  uint64_t next_id_ = 1;
  bool draining_ = false;   // Drain() began: no more accepting
  bool keep_alive_ = true;  // false once EndKeepAlive() or Drain() began
  bool shut_down_ = false;  // Shutdown ran: no timer may re-arm
  int max_connections_ = 0;  // options_.max_connections within the descriptor limit (set by Init)
  internal::AcceptErrors accept_errors_;
};

}  // namespace blossom::http

#endif  // BLOSSOM_SERVER_HTTP_SERVER_IMPL_H_
