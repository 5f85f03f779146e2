#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/text/sanitize.h"
#include "server/http/connection.h"
#include "server/http/worker_pool.h"
#include "spdlog/spdlog.h"

namespace blossom::http {

using internal::Connection;
using internal::ErrorResponse;
using internal::Exchange;
using internal::kHighWater;
using internal::Loop;
using internal::NowMs;
using internal::SerializeClosing;
using internal::WorkerPool;

namespace {

// While a request is in flight the I/O thread keeps reading (to notice a disconnect) but stops
// buffering pipelined input beyond this much over the request limits.
constexpr size_t kInputSlack = 64 << 10;
// How long a connection being closed after an error keeps draining input, so that the client
// reads the error instead of a reset caused by unread data.
constexpr int64_t kLingerMs = 2000;
constexpr uint64_t kListenId = 0;
constexpr uint64_t kEventId = 1;

std::string PeerName(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    return absl::StrCat(buf, ":", ntohs(a->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    return absl::StrCat("[", buf, "]:", ntohs(a->sin6_port));
  }
  return "unknown";
}

}  // namespace

class Server::Impl {
 public:
  Impl(const ServerOptions& options, Handler handler)
      : options_(options), handler_(std::move(handler)), loop_(std::make_shared<Loop>()) {}

  ~Impl() {
    Stop();
    if (listen_fd_ >= 0) close(listen_fd_);
    if (epoll_fd_ >= 0) close(epoll_fd_);
  }

  absl::Status Init() {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    std::string port = std::to_string(options_.port);
    int rc = getaddrinfo(options_.host.empty() ? nullptr : options_.host.c_str(), port.c_str(),
                         &hints, &res);
    if (rc != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot resolve ", options_.host, ": ", gai_strerror(rc)));
    }
    std::string last_error = "no address";
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 4096) == 0) {
        listen_fd_ = fd;
        break;
      }
      last_error = strerror(errno);
      close(fd);
    }
    freeaddrinfo(res);
    if (listen_fd_ < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", options_.host, ":", options_.port, ": ", last_error));
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);

    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    loop_->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd_ < 0 || loop_->event_fd < 0) {
      return absl::InternalError(absl::StrCat("epoll/eventfd: ", strerror(errno)));
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenId;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
    ev.data.u64 = kEventId;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, loop_->event_fd, &ev);

    workers_ = std::make_unique<WorkerPool>(options_.handler_threads);
    io_thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  int port() const { return port_; }

  void Stop() {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    stop_requested_.store(true);
    uint64_t one = 1;
    ssize_t ignored = write(loop_->event_fd, &one, sizeof(one));
    (void)ignored;
    if (io_thread_.joinable()) io_thread_.join();
    if (workers_) workers_->Stop();
  }

 private:
  void Run() {
    std::vector<epoll_event> events(256);
    int64_t next_sweep = NowMs() + SweepIntervalMs();
    while (!stop_requested_.load()) {
      int timeout = static_cast<int>(std::max<int64_t>(0, next_sweep - NowMs()));
      int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout);
      if (n < 0 && errno != EINTR) {
        spdlog::error("http: epoll_wait: {}", strerror(errno));
        break;
      }
      for (int i = 0; i < n && !stop_requested_.load(); ++i) {
        uint64_t id = events[i].data.u64;
        if (id == kListenId) {
          Accept();
        } else if (id == kEventId) {
          HandleWakeups();
        } else {
          auto it = conns_.find(id);
          if (it != conns_.end()) HandleEvent(it->second, events[i].events);
        }
      }
      if (NowMs() >= next_sweep) {
        Sweep();
        next_sweep = NowMs() + SweepIntervalMs();
      }
    }
    {
      std::lock_guard<std::mutex> lock(loop_->mu);
      loop_->stopped = true;
      loop_->dirty.clear();
    }
    close(listen_fd_);
    listen_fd_ = -1;
    std::vector<std::shared_ptr<Connection>> all;
    for (auto& [id, conn] : conns_) all.push_back(conn);
    for (auto& conn : all) Close(conn);
  }

  std::string ProtocolError(int status, const std::string& message, const std::string& target) {
    if (!options_.error_response) return ErrorResponse(status, message);
    Response response = options_.error_response(status, message, target);
    response.status = status;
    return SerializeClosing(response);
  }

  int64_t SweepIntervalMs() const {
    const int64_t shortest = std::min({options_.idle_timeout_ms, options_.header_timeout_ms,
                                       options_.body_timeout_ms});
    return std::max<int64_t>(10, std::min<int64_t>(250, shortest / 4));
  }

  // The connection a new one may replace at max_connections: one already closing, else the
  // one with no request in flight that has waited longest (an unfinished head before an idle
  // keep-alive connection). Null if every connection has a request in flight.
  std::shared_ptr<Connection> EvictionVictim() {
    std::shared_ptr<Connection> best;
    // Lower rank wins: 0 lingering, 1 unfinished head or body, 2 idle; then the oldest.
    int best_rank = 3;
    int64_t best_since = 0;
    for (auto& [id, conn] : conns_) {
      if (conn->current) continue;
      int rank;
      int64_t since;
      if (conn->lingering) {
        rank = 0;
        since = conn->linger_deadline;
      } else if (conn->head_start != 0 || conn->body_start != 0) {
        rank = 1;
        since = conn->head_start != 0 ? conn->head_start : conn->body_start;
      } else {
        rank = 2;
        since = conn->last_activity;
      }
      if (rank < best_rank || (rank == best_rank && since < best_since)) {
        best = conn;
        best_rank = rank;
        best_since = since;
      }
    }
    return best;
  }

  void Accept() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          spdlog::warn("http: accept: {}", strerror(errno));
        }
        return;
      }
      if (static_cast<int>(conns_.size()) >= options_.max_connections) {
        if (std::shared_ptr<Connection> victim = EvictionVictim()) {
          if (!victim->lingering && (victim->head_start != 0 || victim->body_start != 0)) {
            std::string reply = ProtocolError(408, "request not completed in time", "");
            ssize_t ignored = send(victim->fd, reply.data(), reply.size(), MSG_NOSIGNAL);
            (void)ignored;
          }
          Close(victim);
        }
      }
      if (static_cast<int>(conns_.size()) >= options_.max_connections) {
        // Best effort: the reply fits any socket buffer; the client may already be gone.
        std::string reply = ProtocolError(503, "too many connections", "");
        ssize_t ignored = send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
        (void)ignored;
        shutdown(fd, SHUT_WR);
        close(fd);
        continue;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      uint64_t id = next_id_++;
      auto conn = std::make_shared<Connection>(
          id, fd, PeerName(addr),
          ParserLimits{options_.max_header_bytes, options_.max_body_bytes});
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.u64 = id;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        continue;
      }
      conns_[id] = std::move(conn);
    }
  }

  void UpdateInterest(const std::shared_ptr<Connection>& conn, bool reading, bool writing) {
    if (conn->fd < 0) return;
    conn->reading = reading;
    conn->writing = writing;
    // After the peer's FIN, input events would fire forever (level-triggered); a reset still
    // shows up as EPOLLERR/EPOLLHUP, which epoll always reports.
    const uint32_t interest = (conn->peer_eof ? 0u : EPOLLRDHUP | (reading ? EPOLLIN : 0u)) |
                              (writing ? EPOLLOUT : 0u);
    if (interest == conn->interest) return;
    conn->interest = interest;
    epoll_event ev{};
    ev.events = interest;
    ev.data.u64 = conn->id;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn->fd, &ev);
  }

  void HandleEvent(std::shared_ptr<Connection> conn, uint32_t events) {
    if (events & (EPOLLERR | EPOLLHUP)) {  // reset, or both directions closed
      Close(conn);
      return;
    }
    if (events & (EPOLLIN | EPOLLRDHUP)) {
      bool eof = false, full = false;
      char buf[64 << 10];
      for (;;) {
        ssize_t n = recv(conn->fd, buf, sizeof(buf), 0);
        if (n > 0) {
          conn->last_activity = NowMs();
          if (!conn->lingering) conn->in.append(buf, static_cast<size_t>(n));
          if (conn->in.size() > options_.max_header_bytes + options_.max_body_bytes + kInputSlack) {
            full = true;
            break;  // enough buffered; ProcessInput or the interest update below deals with it
          }
          continue;
        }
        if (n == 0) {
          eof = true;
        } else if (errno == EINTR) {
          continue;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
          Close(conn);  // reset
          return;
        }
        break;
      }
      if (eof || (full && (events & EPOLLRDHUP))) {
        if (conn->lingering || full) {
          Close(conn);
        } else {
          OnPeerEof(conn);
        }
        return;
      }
      ProcessInput(conn);
      if (conn->fd < 0) return;
    }
    if (events & EPOLLOUT) {
      FlushAndAdvance(conn);
    }
  }

  // The peer shut down its sending side (see "Half-close" in http_server.h).
  void OnPeerEof(const std::shared_ptr<Connection>& conn) {
    conn->peer_eof = true;
    if (!conn->current) {
      ProcessInput(conn);  // answers what arrived before the FIN, or closes
      if (conn->fd < 0 || !conn->current) return;
    }
    {
      bool probe = false, gone = false;
      {
        std::lock_guard<std::mutex> lock(conn->mu);
        if (conn->current->phase == Exchange::Phase::kIdle) {
          // HTTP/1.0 has no 1xx responses: its peer is assumed to wait for the answer.
          probe = !conn->current->http10;
          if (probe) conn->out += "HTTP/1.1 100 Continue\r\n\r\n";
        } else if (conn->current->phase == Exchange::Phase::kStreaming) {
          gone = true;
        }
      }
      if (gone) {
        Close(conn);
        return;
      }
      UpdateInterest(conn, false, conn->writing);
      if (probe) FlushAndAdvance(conn);
    }
  }

  void HandleWakeups() {
    uint64_t count;
    ssize_t ignored = read(loop_->event_fd, &count, sizeof(count));
    (void)ignored;
    std::vector<std::shared_ptr<Connection>> dirty;
    {
      std::lock_guard<std::mutex> lock(loop_->mu);
      dirty.swap(loop_->dirty);
    }
    for (auto& conn : dirty) {
      if (conn->fd >= 0) FlushAndAdvance(conn);
    }
  }

  void ProcessInput(const std::shared_ptr<Connection>& conn) {
    while (conn->fd >= 0 && !conn->current && !conn->close_after_response && !conn->lingering) {
      if (!conn->in.empty() && conn->head_start == 0 && !conn->parser.reading_body()) {
        conn->head_start = NowMs();
      }
      RequestParser::Result r = conn->parser.Parse(&conn->in);
      if (r == RequestParser::Result::kNeedMore) {
        if (conn->peer_eof) {
          // Nothing more will come: an unfinished request gets an answer, not silence.
          if (conn->head_start != 0 || conn->body_start != 0) {
            std::lock_guard<std::mutex> lock(conn->mu);
            conn->out += ProtocolError(400, "connection closed before the request was complete",
                                       conn->parser.request().target);
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
          conn->out += "HTTP/1.1 100 Continue\r\n\r\n";
        }
        continue;
      }
      if (r == RequestParser::Result::kError) {
        {
          std::lock_guard<std::mutex> lock(conn->mu);
          conn->out += ProtocolError(conn->parser.error_status(), conn->parser.error_message(),
                                     conn->parser.request().target);
        }
        conn->close_after_response = true;
        break;
      }
      conn->head_start = 0;
      conn->body_start = 0;
      Dispatch(conn);
    }
    // Stop reading pipelined input while a request is in flight and plenty is buffered; EPOLLRDHUP
    // still reports a disconnect.
    bool reading = conn->in.size() <= options_.max_header_bytes + options_.max_body_bytes + kInputSlack ||
                   conn->lingering;
    UpdateInterest(conn, reading, conn->writing);
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
    ex->close_after = !keep_alive;
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

  // Writes what it can; when the current response is complete and flushed, moves on to the next
  // pipelined request or closes the connection.
  void FlushAndAdvance(const std::shared_ptr<Connection>& conn) {
    if (conn->fd < 0) return;
    bool error = false, done = false, close_after = false;
    size_t pending = 0;
    {
      std::lock_guard<std::mutex> lock(conn->mu);
      while (conn->out_offset < conn->out.size()) {
        ssize_t n = send(conn->fd, conn->out.data() + conn->out_offset,
                         conn->out.size() - conn->out_offset, MSG_NOSIGNAL);
        if (n > 0) {
          conn->out_offset += static_cast<size_t>(n);
          conn->last_write_progress = NowMs();
        } else if (n < 0 && errno == EINTR) {
          continue;
        } else {
          if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) error = true;
          break;
        }
      }
      if (conn->out_offset == conn->out.size()) {
        conn->out.clear();
        conn->out_offset = 0;
      } else if (conn->out_offset > (1 << 20)) {
        conn->out.erase(0, conn->out_offset);
        conn->out_offset = 0;
      }
      pending = conn->out.size() - conn->out_offset;
      if (conn->current && conn->current->phase == Exchange::Phase::kDone) {
        done = true;
        close_after = conn->current->close_after;
      }
    }
    if (pending <= kHighWater / 2) conn->drained.notify_all();
    if (error) {
      Close(conn);
      return;
    }
    if (done) {
      conn->current.reset();
      conn->last_activity = NowMs();
      if (close_after) conn->close_after_response = true;
    }
    UpdateInterest(conn, conn->reading, pending > 0);
    if (pending > 0) return;
    if (conn->close_after_response && !conn->current) {
      if (conn->peer_eof) {
        Close(conn);  // all sent; the peer has nothing more to say, so no reset can follow
        return;
      }
      if (!conn->lingering) {
        // Half-close and drain, so a client still sending (a body we refused, pipelined
        // requests) reads our response instead of a reset.
        shutdown(conn->fd, SHUT_WR);
        conn->lingering = true;
        conn->in.clear();
        conn->linger_deadline = NowMs() + kLingerMs;
        UpdateInterest(conn, true, false);
      }
      return;
    }
    if (done) {
      ProcessInput(conn);  // the next pipelined request; after the peer's FIN, closes when none
      if (conn->fd >= 0 && conn->peer_eof && !conn->current) {
        conn->close_after_response = true;
        FlushAndAdvance(conn);
      }
    }
  }

  void Close(const std::shared_ptr<Connection>& conn) {
    if (conn->fd < 0) return;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn->fd, nullptr);
    close(conn->fd);
    conn->fd = -1;
    std::function<void()> callback;
    {
      std::lock_guard<std::mutex> lock(conn->mu);
      conn->closed = true;
      conn->out.clear();
      conn->out_offset = 0;
      if (conn->current && conn->current->phase != Exchange::Phase::kDone &&
          !conn->current->on_close_done && conn->current->on_close) {
        callback = std::move(conn->current->on_close);
        conn->current->on_close_done = true;
      }
    }
    conn->drained.notify_all();
    conn->current.reset();
    conns_.erase(conn->id);
    if (callback) callback();
  }

  void Sweep() {
    int64_t now = NowMs();
    std::vector<std::shared_ptr<Connection>> expired, late;
    for (auto& [id, conn] : conns_) {
      if (conn->lingering) {
        if (now >= conn->linger_deadline) expired.push_back(conn);
        continue;
      }
      bool stalled;
      {
        std::lock_guard<std::mutex> lock(conn->mu);
        stalled = conn->out.size() > conn->out_offset &&
                  now - conn->last_write_progress > options_.idle_timeout_ms;
      }
      bool idle = !conn->current && now - conn->last_activity > options_.idle_timeout_ms;
      if (stalled || idle) {
        expired.push_back(conn);
      } else if (!conn->current && !conn->close_after_response &&
                 ((conn->head_start != 0 && now - conn->head_start > options_.header_timeout_ms) ||
                  (conn->body_start != 0 && now - conn->body_start > options_.body_timeout_ms))) {
        late.push_back(conn);
      }
    }
    for (auto& conn : expired) Close(conn);
    for (auto& conn : late) {
      if (conn->fd < 0) continue;
      const bool head = conn->head_start != 0;
      {
        std::lock_guard<std::mutex> lock(conn->mu);
        conn->out += ProtocolError(
            408,
            absl::StrCat(head ? "request head" : "request body", " not received within ",
                         (head ? options_.header_timeout_ms : options_.body_timeout_ms) / 1000.0,
                         " s"),
            conn->parser.request().target);
      }
      conn->head_start = conn->body_start = 0;
      conn->close_after_response = true;
      FlushAndAdvance(conn);
    }
  }

  const ServerOptions options_;
  const Handler handler_;
  const std::shared_ptr<Loop> loop_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int port_ = 0;
  std::thread io_thread_;
  std::unique_ptr<WorkerPool> workers_;
  std::atomic<bool> stop_requested_{false};
  std::mutex stop_mu_;
  bool stopped_ = false;  // guarded by stop_mu_

  // I/O thread only.
  std::unordered_map<uint64_t, std::shared_ptr<Connection>> conns_;
  uint64_t next_id_ = 2;  // 0 and 1 are the listen socket and the eventfd
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

void Server::Stop() { impl_->Stop(); }

}  // namespace blossom::http
