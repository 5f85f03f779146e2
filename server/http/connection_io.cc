// Server::Impl's side of one connection (server_impl.h): reading and parsing requests,
// dispatching them to the handler pool, writing the queued output, and closing.
#include <exception>
#include <mutex>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>

#include "engine/text/sanitize.h"
#include "server/http/connection.h"
#include "server/http/http_parser.h"
#include "server/http/server_impl.h"
#include "spdlog/spdlog.h"

namespace blossom::http {

using internal::Exchange;
using internal::kLowWater;
using internal::NowMs;
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

bool Server::Impl::WantsInput(const ConnectionPtr& conn) const {
  // Stop reading pipelined input while a request is in flight and plenty is buffered.
  return conn->open && !conn->handshaking && !conn->peer_eof &&
         (conn->lingering ||
          conn->in.size() <= options_.max_header_bytes + options_.max_body_bytes + kInputSlack);
}

void Server::Impl::StartRead(const ConnectionPtr& conn) {
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

void Server::Impl::OnPeerEof(const ConnectionPtr& conn) {
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

void Server::Impl::ProcessInput(const ConnectionPtr& conn) {
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

void Server::Impl::Dispatch(const ConnectionPtr& conn) {
  auto ex = std::make_shared<Exchange>();
  Request request = std::move(conn->parser.request());
  const bool keep_alive = conn->parser.keep_alive();
  conn->parser.Reset();
  request.peer = conn->peer;
  ex->http10 = request.version_minor == 0;
  ex->head = request.method == "HEAD";
  ex->close_after = !keep_alive || !keep_alive_;
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

void Server::Impl::FlushAndAdvance(const ConnectionPtr& conn) {
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

void Server::Impl::WriteSome(const ConnectionPtr& conn) {
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

void Server::Impl::Close(const ConnectionPtr& conn) {
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

}  // namespace blossom::http
