#include "server/http/http_server.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/http/connection.h"
#include "server/http/eviction.h"
#include "server/http/listener.h"
#include "server/http/server_impl.h"
#include "server/http/tls_context.h"
#include "server/http/worker_pool.h"
#include "spdlog/spdlog.h"

namespace blossom::http {

using internal::Connection;
using internal::EvictionVictim;
using internal::Exchange;
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

absl::Status Server::Impl::Init() {
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

void Server::Impl::EndKeepAlive() {
  std::lock_guard<std::mutex> lock(stop_mu_);  // the I/O thread runs until this returns
  if (stopped_) return;
  std::promise<void> done;
  asio::post(*io_, [this, &done] {
    StopKeepAlive();
    done.set_value();
  });
  done.get_future().wait();
}

absl::Status Server::Impl::Drain(absl::Time deadline) {
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

void Server::Impl::Stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  if (io_thread_.joinable()) {
    asio::post(*io_, [this] { Shutdown(); });
    io_thread_.join();
  }
  if (workers_) workers_->Stop();
}

void Server::Impl::Shutdown() {
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

void Server::Impl::StartDraining() {
  draining_ = true;
  error_code ignored;
  acceptor_.close(ignored);
  accept_timer_.cancel();
  StopKeepAlive();
}

void Server::Impl::StopKeepAlive() {
  keep_alive_ = false;
  for (auto& [id, conn] : conns_) {
    std::lock_guard<std::mutex> lock(conn->mu);
    if (conn->current) conn->current->close_after = true;
  }
}

size_t Server::Impl::BusyConnections() {
  size_t busy = 0;
  for (auto& [id, conn] : conns_) {
    if (conn->current || conn->HasUnsentOutput()) ++busy;
  }
  return busy;
}

Response Server::Impl::ProtocolErrorResponse(int status, const std::string& message,
                                             const std::string& target) {
  if (!options_.error_response) return internal::PlainError(status, message);
  Response response = options_.error_response(status, message, target);
  response.status = status;
  return response;
}

std::string Server::Impl::ProtocolError(int status, const std::string& message, const std::string& target) {
  return SerializeClosing(ProtocolErrorResponse(status, message, target));
}

void Server::Impl::ArmSweep() {
  sweep_timer_.expires_after(std::chrono::milliseconds(internal::SweepIntervalMs(options_)));
  sweep_timer_.async_wait([this](error_code ec) {
    // A timer that expired just before Shutdown cancelled it completes without an error:
    // re-arming then would keep io_->run() (and Stop) from ever returning.
    if (ec || shut_down_) return;
    Sweep();
    ArmSweep();
  });
}

void Server::Impl::Refuse(Tcp::socket& socket, const std::string& message) {
  if (!use_tls_) {
    Response response = ProtocolErrorResponse(503, message, "");
    if (std::none_of(response.headers.begin(), response.headers.end(), [](const auto& header) {
          return absl::EqualsIgnoreCase(header.first, "retry-after");
        })) {
      response.headers.emplace_back("Retry-After", "1");
    }
    SendNow(socket, SerializeClosing(response));
    error_code ignored;
    socket.shutdown(tcp::socket::shutdown_send, ignored);
  }
  error_code ignored;
  socket.close(ignored);
}

void Server::Impl::Accept() {
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

void Server::Impl::OnAccept(Tcp::socket socket) {
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

void Server::Impl::Sweep() {
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

void Server::EndKeepAlive() { impl_->EndKeepAlive(); }

absl::Status Server::Drain(absl::Time deadline) { return impl_->Drain(deadline); }

void Server::Stop() { impl_->Stop(); }

}  // namespace blossom::http
