#include "server/http/http_server.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/text/sanitize.h"
#include "server/http/connection.h"
#include "server/http/eviction.h"
#include "server/http/listener.h"
#include "server/http/tls_context.h"
#include "server/http/worker_pool.h"
#include "spdlog/spdlog.h"

namespace blossom::http {

using internal::Connection;
using internal::ConnectionMap;
using internal::ErrorResponse;
using internal::EvictionVictim;
using internal::Exchange;
using internal::kLowWater;
using internal::Loop;
using internal::NowMs;
using internal::PeerName;
using internal::SendNow;
using internal::SerializeClosing;
using internal::Stream;
using internal::SweepAction;
using internal::WorkerPool;
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

// While a request is in flight the I/O thread keeps reading (to notice a disconnect) but stops
// buffering pipelined input beyond this much over the request limits.
constexpr size_t kInputSlack = 64 << 10;
// How long a connection being closed after an error keeps draining input, so that the client
// reads the error instead of a reset caused by unread data.
constexpr int64_t kLingerMs = 2000;

}  // namespace

class Server::Impl {
 public:
  Impl(const ServerOptions& options, Handler handler)
      : options_(options),
        handler_(std::move(handler)),
        loop_(std::make_shared<Loop>()),
        acceptor_(*io_),
        accept_timer_(*io_),
        sweep_timer_(*io_) {}

  ~Impl() { Stop(); }

  absl::Status Init() {
    if (options_.tls_cert_file.empty() != options_.tls_key_file.empty()) {
      return absl::InvalidArgumentError("TLS needs both a certificate file and a key file");
    }
    if (!options_.tls_cert_file.empty()) {
      absl::StatusOr<std::unique_ptr<internal::TlsContextSource>> tls =
          internal::TlsContextSource::Create(options_.tls_cert_file, options_.tls_key_file);
      if (!tls.ok()) return tls.status();
      tls_ = std::move(*tls);
      use_tls_ = true;
    }
    if (absl::Status status = internal::OpenListener(options_.host, options_.port, &acceptor_);
        !status.ok()) {
      return status;
    }
    max_connections_ = internal::MaxConnectionsWithinFdLimit(options_.max_connections);
    error_code ec;
    port_ = acceptor_.local_endpoint(ec).port();
    loop_->flush = [this](std::shared_ptr<Connection> conn) {
      asio::post(*io_, [this, conn = std::move(conn)] { FlushAndAdvance(conn); });
    };
    workers_ = std::make_unique<WorkerPool>(options_.handler_threads);
    Accept();
    ArmSweep();
    io_thread_ = std::thread([this] { io_->run(); });
    return absl::OkStatus();
  }

  int port() const { return port_; }

  absl::Status Drain(absl::Time deadline) {
    // Held throughout, so the I/O thread runs until this returns (Stop waits).
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopped_) return absl::FailedPreconditionError("the server has stopped");
    asio::post(*io_, [this] { StartDraining(); });
    for (;;) {
      std::promise<size_t> busy;
      asio::post(*io_, [this, &busy] { busy.set_value(BusyConnections()); });
      const size_t left = busy.get_future().get();
      if (left == 0) return absl::OkStatus();
      const absl::Time now = absl::Now();
      if (now >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            left, " connections still have a response in flight or output unsent"));
      }
      absl::SleepFor(std::min(absl::Milliseconds(10), deadline - now));
    }
  }

  void Stop() {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    if (io_thread_.joinable()) {
      asio::post(*io_, [this] { Shutdown(); });
      io_thread_.join();
    }
    if (workers_) workers_->Stop();
  }

 private:
  // I/O thread: stops accepting and closes every connection (OnClose runs). io_->run() then
  // returns once the aborted operations have completed, so no handler (and no connection it
  // holds) is left queued.
  void Shutdown() {
    shut_down_ = true;
    {
      std::lock_guard<std::mutex> lock(loop_->mu);
      loop_->stopped = true;
    }
    error_code ignored;
    acceptor_.close(ignored);
    accept_timer_.cancel();
    sweep_timer_.cancel();
    std::vector<std::shared_ptr<Connection>> all;
    for (auto& [id, conn] : conns_) all.push_back(conn);
    for (auto& conn : all) Close(conn);
  }

  // I/O thread: stops accepting; from now on every response closes its connection, and so does
  // an exchange in flight whose response has not started.
  void StartDraining() {
    draining_ = true;
    error_code ignored;
    acceptor_.close(ignored);
    accept_timer_.cancel();
    for (auto& [id, conn] : conns_) {
      std::lock_guard<std::mutex> lock(conn->mu);
      if (conn->current && conn->current->phase == Exchange::Phase::kIdle) {
        conn->current->close_after = true;
      }
    }
  }

  // I/O thread: connections with an exchange in flight or output not yet written.
  size_t BusyConnections() {
    size_t busy = 0;
    for (auto& [id, conn] : conns_) {
      if (conn->current || conn->HasUnsentOutput()) ++busy;
    }
    return busy;
  }

  std::string ProtocolError(int status, const std::string& message, const std::string& target) {
    if (!options_.error_response) return ErrorResponse(status, message);
    Response response = options_.error_response(status, message, target);
    response.status = status;
    return SerializeClosing(response);
  }

  void ArmSweep() {
    sweep_timer_.expires_after(std::chrono::milliseconds(internal::SweepIntervalMs(options_)));
    sweep_timer_.async_wait([this](error_code ec) {
      // A timer that expired just before Shutdown cancelled it completes without an error:
      // re-arming then would keep io_->run() (and Stop) from ever returning.
      if (ec || shut_down_) return;
      Sweep();
      ArmSweep();
    });
  }

  // Refuses a connection before it is served: a plain-text 503 (TLS peers, which could not
  // read it before a handshake, are just closed).
  void Refuse(tcp::socket& socket, const std::string& message) {
    if (!use_tls_) {
      SendNow(socket, ProtocolError(503, message, ""));
      error_code ignored;
      socket.shutdown(tcp::socket::shutdown_send, ignored);
    }
    error_code ignored;
    socket.close(ignored);
  }

  void Accept() {
    acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {  // accepting again at once would spin (see AcceptErrors)
        accept_errors_.Record(ec, conns_.size());
        accept_timer_.expires_after(internal::AcceptErrors::kRetry);
        accept_timer_.async_wait([this](error_code ec) {
          if (!ec && !shut_down_ && !draining_) Accept();
        });
        return;
      }
      OnAccept(std::move(socket));
      Accept();
    });
  }

  void OnAccept(tcp::socket socket) {
    error_code ec;
    const tcp::endpoint remote = socket.remote_endpoint(ec);
    if (ec) return;  // already gone
    std::string ip = remote.address().to_string();
    if (auto it = connections_per_ip_.find(ip); options_.max_connections_per_ip > 0 &&
                                                   it != connections_per_ip_.end() &&
                                                   it->second >= options_.max_connections_per_ip) {
      Refuse(socket, absl::StrCat("too many connections from ", ip, " (at most ",
                                  options_.max_connections_per_ip, ")"));
      return;
    }
    if (static_cast<int>(conns_.size()) >= max_connections_) {
      if (std::shared_ptr<Connection> victim = EvictionVictim(conns_)) {
        if (!victim->stream.tls() && !victim->lingering &&
            (victim->head_start != 0 || victim->body_start != 0)) {
          SendNow(victim->stream.tcp(), ProtocolError(408, "request not completed in time", ""));
        }
        Close(victim);
      }
    }
    if (static_cast<int>(conns_.size()) >= max_connections_) {
      Refuse(socket, "too many connections");
      return;
    }
    socket.set_option(tcp::no_delay(true), ec);
    const uint64_t id = next_id_++;
    auto conn = std::make_shared<Connection>(
        io_, id, use_tls_ ? Stream(std::move(socket), tls_->Current()) : Stream(std::move(socket)),
        PeerName(remote), ip, ParserLimits{options_.max_header_bytes, options_.max_body_bytes});
    conns_[id] = conn;
    ++connections_per_ip_[ip];
    if (conn->stream.tls()) {
      // The handshake counts against the head deadline (a slowloris could stall it too).
      conn->handshaking = true;
      conn->head_start = NowMs();
      conn->stream.tls_stream().async_handshake(
          asio::ssl::stream_base::server, [this, conn](error_code ec) {
            if (!conn->open) return;
            if (ec) {
              spdlog::debug("http: TLS handshake with {}: {}", conn->peer, ec.message());
              Close(conn);
              return;
            }
            conn->handshaking = false;
            conn->head_start = 0;
            conn->last_activity = NowMs();
            StartRead(conn);
          });
      return;
    }
    StartRead(conn);
  }

  bool WantsInput(const std::shared_ptr<Connection>& conn) const {
    // Stop reading pipelined input while a request is in flight and plenty is buffered.
    return conn->open && !conn->handshaking && !conn->peer_eof &&
           (conn->lingering ||
            conn->in.size() <= options_.max_header_bytes + options_.max_body_bytes + kInputSlack);
  }

  void StartRead(const std::shared_ptr<Connection>& conn) {
    if (conn->read_pending || !WantsInput(conn)) return;
    conn->read_pending = true;
    conn->stream.AsyncReadSome(
        asio::buffer(conn->read_buffer), [this, conn](error_code ec, size_t n) {
          conn->read_pending = false;
          if (!conn->open) return;
          if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) {
            if (conn->lingering) {
              Close(conn);
            } else {
              OnPeerEof(conn);
            }
            return;
          }
          if (ec) {  // reset
            Close(conn);
            return;
          }
          conn->last_activity = NowMs();
          if (!conn->lingering) conn->in.append(conn->read_buffer.data(), n);
          ProcessInput(conn);
          StartRead(conn);
        });
  }

  // The peer shut down its sending side (see "Half-close" in http_server.h).
  void OnPeerEof(const std::shared_ptr<Connection>& conn) {
    conn->peer_eof = true;
    if (!conn->current) {
      ProcessInput(conn);  // answers what arrived before the FIN, or closes
      if (!conn->open || !conn->current) return;
    }
    bool probe = false, gone = false;
    {
      std::lock_guard<std::mutex> lock(conn->mu);
      if (conn->current->phase == Exchange::Phase::kIdle) {
        // HTTP/1.0 has no 1xx responses: its peer is assumed to wait for the answer.
        probe = !conn->current->http10;
        if (probe) conn->QueueOutputLocked("HTTP/1.1 100 Continue\r\n\r\n");
      } else if (conn->current->phase == Exchange::Phase::kStreaming) {
        gone = true;
      }
    }
    if (gone) {
      Close(conn);
      return;
    }
    if (probe) FlushAndAdvance(conn);
  }

  void ProcessInput(const std::shared_ptr<Connection>& conn) {
    while (conn->open && !conn->current && !conn->close_after_response && !conn->lingering) {
      RequestParser::Result r = conn->parser.Parse(&conn->in);
      // The head deadline runs from a head's first byte; empty lines before a request (which
      // the parser skips) leave the connection idle.
      if (conn->head_start == 0 && conn->parser.in_head()) conn->head_start = NowMs();
      if (r == RequestParser::Result::kNeedMore) {
        if (conn->peer_eof) {
          // Nothing more will come: an unfinished request gets an answer, not silence.
          if (conn->head_start != 0 || conn->body_start != 0) {
            std::lock_guard<std::mutex> lock(conn->mu);
            conn->QueueOutputLocked(
                ProtocolError(400, "connection closed before the request was complete",
                              conn->parser.request().target));
          }
          conn->close_after_response = true;
        }
        break;
      }
      if (r == RequestParser::Result::kHeadersComplete) {
        conn->head_start = 0;
        conn->body_start = NowMs();
        // Only ask for the body if the client has not started sending it already.
        if (conn->parser.expects_continue() && conn->in.empty()) {
          std::lock_guard<std::mutex> lock(conn->mu);
          conn->QueueOutputLocked("HTTP/1.1 100 Continue\r\n\r\n");
        }
        continue;
      }
      if (r == RequestParser::Result::kError) {
        {
          std::lock_guard<std::mutex> lock(conn->mu);
          conn->QueueOutputLocked(ProtocolError(conn->parser.error_status(),
                                                conn->parser.error_message(),
                                                conn->parser.request().target));
        }
        conn->close_after_response = true;
        break;
      }
      conn->head_start = 0;
      conn->body_start = 0;
      Dispatch(conn);
    }
    FlushAndAdvance(conn);
  }

  void Dispatch(const std::shared_ptr<Connection>& conn) {
    auto ex = std::make_shared<Exchange>();
    Request request = std::move(conn->parser.request());
    const bool keep_alive = conn->parser.keep_alive();
    conn->parser.Reset();
    request.peer = conn->peer;
    ex->http10 = request.version_minor == 0;
    ex->head = request.method == "HEAD";
    ex->close_after = !keep_alive || draining_;
    conn->current = ex;
    auto writer = internal::MakeWriter(loop_, conn, ex);
    workers_->Submit([this, request = std::move(request), writer = std::move(writer)]() mutable {
      try {
        handler_(request, writer);
      } catch (const std::exception& e) {
        spdlog::error("http: handler for {} {} threw: {}", request.method,
                      SanitizeForMessage(request.path, 200), SanitizeForMessage(e.what(), 300));
        writer->Send(Response{500, {{"Content-Type", "text/plain"}}, "internal error\n"});
      }
    });
  }

  // Hands queued output to the socket (one asynchronous write at a time); when the current
  // response is complete and flushed, moves on to the next pipelined request or closes.
  void FlushAndAdvance(const std::shared_ptr<Connection>& conn) {
    if (!conn->open) return;
    bool done = false, close_after = false, start_write = false;
    size_t pending = 0;
    std::vector<std::function<void()>> writable;
    {
      std::lock_guard<std::mutex> lock(conn->mu);
      if (!conn->write_pending && !conn->out.empty()) {
        conn->sending.swap(conn->out);
        conn->out.clear();
        conn->sending_left = conn->sending.size();
        conn->write_pending = start_write = true;
      }
      pending = conn->UnsentLocked();
      writable = conn->TakeWritableLocked();
      if (conn->current && conn->current->phase == Exchange::Phase::kDone) {
        done = true;
        close_after = conn->current->close_after;
      }
    }
    if (pending <= kLowWater) conn->drained.notify_all();
    for (auto& run : writable) run();
    if (done) {
      conn->current.reset();
      conn->last_activity = NowMs();
      conn->advance_after_flush = true;
      if (close_after) conn->close_after_response = true;
    }
    if (start_write) WriteSome(conn);
    if (pending > 0) return;  // the write's completion comes back here
    if (conn->close_after_response && !conn->current) {
      if (conn->peer_eof) {
        Close(conn);  // all sent; the peer has nothing more to say, so no reset can follow
        return;
      }
      if (!conn->lingering) {
        // Half-close and drain, so a client still sending (a body we refused, pipelined
        // requests) reads our response instead of a reset.
        error_code ignored;
        conn->stream.tcp().shutdown(tcp::socket::shutdown_send, ignored);
        conn->lingering = true;
        conn->in.clear();
        conn->linger_deadline = NowMs() + kLingerMs;
        StartRead(conn);
      }
      return;
    }
    if (conn->advance_after_flush && !conn->current) {
      conn->advance_after_flush = false;
      ProcessInput(conn);  // the next pipelined request; after the peer's FIN, closes when none
      if (conn->open && conn->peer_eof && !conn->current) {
        conn->close_after_response = true;
        FlushAndAdvance(conn);
      }
      StartRead(conn);
    }
  }

  // Writes the rest of conn->sending; I/O thread, one write in flight per connection.
  void WriteSome(const std::shared_ptr<Connection>& conn) {
    const size_t offset = conn->sending.size() - conn->sending_left;
    conn->stream.AsyncWriteSome(
        asio::buffer(conn->sending.data() + offset, conn->sending_left),
        [this, conn](error_code ec, size_t n) {
          if (!conn->open) return;
          if (ec) {
            Close(conn);
            return;
          }
          conn->last_activity = NowMs();  // the idle timeout runs from the end of the output
          bool more;
          {
            std::lock_guard<std::mutex> lock(conn->mu);
            conn->sending_left -= n;
            conn->last_write_progress = NowMs();
            more = conn->sending_left > 0;
            if (!more) {
              conn->sending.clear();
              conn->write_pending = false;
            }
          }
          if (more) {
            WriteSome(conn);
          }
          FlushAndAdvance(conn);
        });
  }

  void Close(const std::shared_ptr<Connection>& conn) {
    if (!conn->open) return;
    conn->open = false;
    error_code ignored;
    conn->stream.tcp().close(ignored);  // pending reads and writes complete as aborted
    std::function<void()> callback;
    std::vector<std::function<void()>> writable;
    {
      std::lock_guard<std::mutex> lock(conn->mu);
      conn->closed = true;
      conn->out.clear();
      conn->sending_left = 0;
      writable.swap(conn->on_writable);
      if (conn->current && conn->current->phase != Exchange::Phase::kDone &&
          !conn->current->on_close_done && conn->current->on_close) {
        callback = std::move(conn->current->on_close);
        conn->current->on_close_done = true;
      }
    }
    conn->drained.notify_all();
    conn->current.reset();
    conns_.erase(conn->id);
    auto it = connections_per_ip_.find(conn->ip);
    if (it != connections_per_ip_.end() && --it->second <= 0) connections_per_ip_.erase(it);
    if (callback) callback();
    for (auto& run : writable) run();
  }

  void Sweep() {
    int64_t now = NowMs();
    std::vector<std::shared_ptr<Connection>> expired, late;
    for (auto& [id, conn] : conns_) {
      switch (internal::SweepVerdict(*conn, now, options_)) {
        case SweepAction::kClose:
          expired.push_back(conn);
          break;
        case SweepAction::kRequestTimeout:
          late.push_back(conn);
          break;
        case SweepAction::kKeep:
          break;
      }
    }
    for (auto& conn : expired) Close(conn);
    for (auto& conn : late) {
      if (!conn->open) continue;
      {
        std::lock_guard<std::mutex> lock(conn->mu);
        conn->QueueOutputLocked(ProtocolError(408, internal::RequestTimeoutMessage(*conn, options_),
                                              conn->parser.request().target));
      }
      conn->head_start = conn->body_start = 0;
      conn->close_after_response = true;
      FlushAndAdvance(conn);
    }
  }

  const ServerOptions options_;
  const Handler handler_;
  const std::shared_ptr<Loop> loop_;
  // Shared with every connection (whose sockets must not outlive it; a writer can keep a
  // connection after the server is gone). Declared before the I/O objects here.
  const std::shared_ptr<asio::io_context> io_ = std::make_shared<asio::io_context>(1);
  tcp::acceptor acceptor_;
  asio::steady_timer accept_timer_;  // the pause after a failed accept
  asio::steady_timer sweep_timer_;
  std::unique_ptr<internal::TlsContextSource> tls_;  // null for plain HTTP
  bool use_tls_ = false;
  int port_ = 0;
  std::thread io_thread_;
  std::unique_ptr<WorkerPool> workers_;
  std::mutex stop_mu_;
  bool stopped_ = false;  // guarded by stop_mu_

  // I/O thread only.
  ConnectionMap conns_;
  std::unordered_map<std::string, int> connections_per_ip_;
  uint64_t next_id_ = 1;
  bool draining_ = false;  // Drain() began: no more accepting or keep-alive
  bool shut_down_ = false;  // Shutdown ran: no timer may re-arm
  int max_connections_ = 0;  // options_.max_connections within the descriptor limit (set by Init)
  internal::AcceptErrors accept_errors_;
};

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options,
                                                      Handler handler) {
  if (!handler) return absl::InvalidArgumentError("handler is required");
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("invalid port ", options.port));
  }
  auto impl = std::make_shared<Impl>(options, std::move(handler));
  absl::Status status = impl->Init();
  if (!status.ok()) return status;
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::~Server() { Stop(); }

int Server::port() const { return impl_->port(); }

absl::Status Server::Drain(absl::Time deadline) { return impl_->Drain(deadline); }

void Server::Stop() { impl_->Stop(); }

}  // namespace blossom::http
