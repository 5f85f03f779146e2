// Per-connection state shared by the HTTP server's I/O thread and the response writers of
// handler threads, the serialisation of responses, and the socket-level helpers (TLS setup, reset
// detection). Internal to //server/http:http_server.
#ifndef BLOSSOM_SERVER_HTTP_CONNECTION_H_
#define BLOSSOM_SERVER_HTTP_CONNECTION_H_

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/http/http_parser.h"
#include "server/http/http_server.h"

namespace blossom::http::internal {

// Unsent output above which WriteChunk blocks; blocked writers wake, and OnWritable callbacks
// run, once it is at most kLowWater.
constexpr size_t kHighWater = 4 << 20;
constexpr size_t kLowWater = kHighWater / 2;

inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A complete response that closes the connection.
std::string SerializeClosing(const Response& response);
// A text/plain error response, and the same serialized to close the connection.
Response PlainError(int status, absl::string_view message);
std::string ErrorResponse(int status, absl::string_view message);

// "ip:port" ("[ip]:port" for IPv6).
std::string PeerName(const boost::asio::ip::tcp::endpoint& endpoint);

// Sends a short reply at once, best effort, without blocking (it fits any socket buffer; the
// peer may be gone). Only on a socket with no output queued.
void SendNow(boost::asio::ip::tcp::socket& socket, const std::string& data);

// The bytes in the kernel's send queue of `socket` (not yet acknowledged by the peer); 0 if
// unknown.
size_t KernelSendQueue(boost::asio::ip::tcp::socket& socket);

// Whether a peer that sent its FIN has since reset the connection (it closed completely and
// answered our output, such as the half-close probe, with a reset). Nothing is read after a
// FIN, and a read would report the FIN again rather than the reset, so the TCP state is asked.
bool PeerReset(boost::asio::ip::tcp::socket& socket);

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

// A connection's byte stream: plain TCP, or TLS over TCP (Asio SSL over OpenSSL).
// Not thread-safe: I/O thread only. One read and one write may be in flight at once.
class Stream {
 public:
  using Tcp = boost::asio::ip::tcp::socket;
  using Tls = boost::asio::ssl::stream<Tcp>;

  explicit Stream(Tcp socket) : plain_(std::make_unique<Tcp>(std::move(socket))) {}
  // Keeps `context` alive as long as the stream: the server may have moved on to a reloaded one.
  Stream(Tcp socket, std::shared_ptr<boost::asio::ssl::context> context)
      : context_(std::move(context)), tls_(std::make_unique<Tls>(std::move(socket), *context_)) {}

  bool tls() const { return tls_ != nullptr; }
  Tls& tls_stream() { return *tls_; }
  Tcp& tcp() { return tls_ ? tls_->next_layer() : *plain_; }

  template <typename Buffer, typename Handler>
  void AsyncReadSome(const Buffer& buffer, Handler&& handler) {
    if (tls_) {
      tls_->async_read_some(buffer, std::forward<Handler>(handler));
    } else {
      plain_->async_read_some(buffer, std::forward<Handler>(handler));
    }
  }
  template <typename Buffer, typename Handler>
  void AsyncWriteSome(const Buffer& buffer, Handler&& handler) {
    if (tls_) {
      tls_->async_write_some(buffer, std::forward<Handler>(handler));
    } else {
      plain_->async_write_some(buffer, std::forward<Handler>(handler));
    }
  }

 private:
  std::unique_ptr<Tcp> plain_;
  std::shared_ptr<boost::asio::ssl::context> context_;  // declared before tls_: outlives it
  std::unique_ptr<Tls> tls_;
};

struct Connection {
  Connection(std::shared_ptr<void> io, uint64_t id, Stream stream, std::string peer,
             std::string ip, ParserLimits limits)
      : io(std::move(io)), id(id), peer(std::move(peer)), ip(std::move(ip)),
        stream(std::move(stream)), parser(limits) {}

  // The io_context of `stream`; a writer may keep the connection after the server is gone,
  // and a socket must not outlive its io_context.
  const std::shared_ptr<void> io;
  const uint64_t id;
  const std::string peer;  // "ip:port"
  const std::string ip;    // the peer's address, the key of the per-address connection count

  // I/O thread only.
  Stream stream;
  bool open = true;                   // the socket is open (false once Close ran)
  bool handshaking = false;           // TLS handshake in progress; no request bytes yet
  bool read_pending = false;          // an async read is in flight
  bool write_pending = false;         // an async write of `sending` is in flight
  std::array<char, 64 << 10> read_buffer;
  std::string sending;                // the bytes being written; `sending_left` of them unsent
  std::string in;
  RequestParser parser;
  std::shared_ptr<Exchange> current;  // the exchange in flight, if any
  bool advance_after_flush = false;   // an exchange completed: go on once its bytes are out
  bool close_after_response = false;  // no further requests on this connection
  bool lingering = false;             // write side shut down; draining input until EOF
  bool peer_eof = false;              // the peer shut down its sending side; no more input
  int64_t linger_deadline = 0;
  int64_t last_activity = NowMs();    // the last read, or write progress
  int64_t head_start = 0;  // when the first byte of the request head being read arrived (or
                           // the TLS handshake began); 0: none
  int64_t body_start = 0;  // when the head of the request whose body is being read completed
  size_t kernel_queue = 0;  // KernelSendQueue at the last timeout sweep

  // Guarded by mu.
  std::mutex mu;
  std::condition_variable drained;  // signalled when unsent output falls low or on close
  // ResponseWriter::OnWritable's pending callbacks (more than one when a pipelined exchange
  // begins before the previous one's writer stopped asking).
  std::vector<std::function<void()>> on_writable;
  std::string out;                  // queued by writers, not yet handed to the socket
  size_t sending_left = 0;          // unsent bytes of `sending`
  int64_t last_write_progress = NowMs();
  bool closed = false;

  // Unsent output (queued or being written); needs mu.
  size_t UnsentLocked() const { return out.size() + sending_left; }
  // Whether output is queued or being written; takes mu. (It may belong to a finished exchange
  // whose peer is still reading it.)
  bool HasUnsentOutput() {
    std::lock_guard<std::mutex> lock(mu);
    return UnsentLocked() > 0;
  }
  // Queues output for the socket; needs mu. Output that finds none unsent starts the stall
  // clock afresh: the sweep closes a connection whose unsent bytes made no progress for the
  // idle timeout, and a response after a long quiet spell has made none only because it was
  // not there yet.
  void QueueOutputLocked(absl::string_view data) {
    if (UnsentLocked() == 0) last_write_progress = NowMs();
    out.append(data.data(), data.size());
  }
  // The pending OnWritable callbacks if they are due (output low, or closed), to run outside mu.
  std::vector<std::function<void()>> TakeWritableLocked() {
    std::vector<std::function<void()>> due;
    if (closed || UnsentLocked() <= kLowWater) due.swap(on_writable);
    return due;
  }
};

// The wake-up channel from writers to the I/O thread; outlives the server while a writer holds
// it, so late writer calls are harmless (Wake does nothing once the server stopped).
struct Loop {
  void Wake(const std::shared_ptr<Connection>& conn) {
    std::lock_guard<std::mutex> lock(mu);
    if (!stopped) flush(conn);
  }

  std::mutex mu;
  bool stopped = false;                                       // guarded by mu
  std::function<void(std::shared_ptr<Connection>)> flush;  // posts a flush to the I/O thread
};

// The ResponseWriter of one exchange on `conn`.
std::shared_ptr<ResponseWriter> MakeWriter(std::shared_ptr<Loop> loop,
                                           std::shared_ptr<Connection> conn,
                                           std::shared_ptr<Exchange> ex);

}  // namespace blossom::http::internal

#endif  // BLOSSOM_SERVER_HTTP_CONNECTION_H_
