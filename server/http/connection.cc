#include "server/http/connection.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace blossom::http::internal {
namespace {

bool IsReservedHeader(absl::string_view name) {
  return absl::EqualsIgnoreCase(name, "content-length") ||
         absl::EqualsIgnoreCase(name, "transfer-encoding") ||
         absl::EqualsIgnoreCase(name, "connection");
}

// Header names and values from handlers must not smuggle CR/LF into the response.
bool IsSafeHeader(absl::string_view name, absl::string_view value) {
  if (name.empty()) return false;
  for (char c : name) {
    if (c == '\r' || c == '\n' || c == ':' || c == ' ') return false;
  }
  for (char c : value) {
    if (c == '\r' || c == '\n') return false;
  }
  return true;
}

std::string ResponseHead(int status, const std::vector<std::pair<std::string, std::string>>& headers,
                         bool close, bool http10) {
  std::string head = absl::StrFormat("HTTP/1.1 %d %s\r\n", status, ReasonPhrase(status));
  absl::StrAppend(&head, "Server: blossom\r\n");
  for (const auto& [name, value] : headers) {
    if (IsReservedHeader(name) || !IsSafeHeader(name, value)) continue;
    absl::StrAppend(&head, name, ": ", value, "\r\n");
  }
  if (close) {
    absl::StrAppend(&head, "Connection: close\r\n");
  } else if (http10) {
    absl::StrAppend(&head, "Connection: keep-alive\r\n");
  }
  return head;
}

}  // namespace

std::string PeerName(const boost::asio::ip::tcp::endpoint& endpoint) {
  const boost::asio::ip::address address = endpoint.address();
  return address.is_v6() ? absl::StrCat("[", address.to_string(), "]:", endpoint.port())
                         : absl::StrCat(address.to_string(), ":", endpoint.port());
}

void SendNow(boost::asio::ip::tcp::socket& socket, const std::string& data) {
  ssize_t ignored =
      send(socket.native_handle(), data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)ignored;
}

size_t KernelSendQueue(boost::asio::ip::tcp::socket& socket) {
  int queued = 0;
  if (ioctl(socket.native_handle(), SIOCOUTQ, &queued) != 0 || queued < 0) return 0;
  return static_cast<size_t>(queued);
}

bool PeerReset(boost::asio::ip::tcp::socket& socket) {
  const int fd = socket.native_handle();
  int error = 0;
  socklen_t len = sizeof(error);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error != 0) return true;
  tcp_info info{};
  len = sizeof(info);
  return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_CLOSE;
}

std::string SerializeClosing(const Response& response) {
  return absl::StrCat(ResponseHead(response.status, response.headers, /*close=*/true, /*http10=*/false),
                      "Content-Length: ", response.body.size(), "\r\n\r\n", response.body);
}

Response PlainError(int status, absl::string_view message) {
  return Response{status, {{"Content-Type", "text/plain; charset=utf-8"}}, absl::StrCat(message, "\n")};
}

std::string ErrorResponse(int status, absl::string_view message) {
  return SerializeClosing(PlainError(status, message));
}

namespace {

class Writer : public ResponseWriter {
 public:
  Writer(std::shared_ptr<Loop> loop, std::shared_ptr<Connection> conn,
         std::shared_ptr<Exchange> ex)
      : loop_(std::move(loop)), conn_(std::move(conn)), ex_(std::move(ex)) {}

  // A handler that forgot to answer gets a 500; an unfinished stream is cut off by closing the
  // connection, so the client sees a truncated response rather than a hang.
  ~Writer() override {
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(conn_->mu);
      if (!conn_->closed && ex_->phase == Exchange::Phase::kIdle) {
        ex_->close_after = true;
        conn_->QueueOutputLocked(ErrorResponse(500, "handler produced no response"));
        ex_->phase = Exchange::Phase::kDone;
        wake = true;
      } else if (!conn_->closed && ex_->phase == Exchange::Phase::kStreaming) {
        ex_->close_after = true;
        ex_->phase = Exchange::Phase::kDone;
        wake = true;
      }
    }
    if (wake) loop_->Wake(conn_);
  }

  bool Send(Response response) override {
    bool http10 = ex_->http10;
    std::string data;
    {
      std::lock_guard<std::mutex> lock(conn_->mu);
      if (conn_->closed || ex_->phase != Exchange::Phase::kIdle) return false;
      data = ResponseHead(response.status, response.headers, ex_->close_after, http10);
      absl::StrAppend(&data, "Content-Length: ", response.body.size(), "\r\n\r\n");
      if (!ex_->head) data += response.body;
      conn_->QueueOutputLocked(data);
      ex_->phase = Exchange::Phase::kDone;
    }
    loop_->Wake(conn_);
    return true;
  }

  bool StartStream(int status, std::vector<std::pair<std::string, std::string>> headers) override {
    {
      std::lock_guard<std::mutex> lock(conn_->mu);
      if (conn_->closed || ex_->phase != Exchange::Phase::kIdle) return false;
      // HTTP/1.0 has no chunked encoding: the body ends when the connection closes.
      if (ex_->http10) ex_->close_after = true;
      std::string head = ResponseHead(status, headers, ex_->close_after, ex_->http10);
      if (!ex_->http10) head += "Transfer-Encoding: chunked\r\n";
      head += "\r\n";
      conn_->QueueOutputLocked(head);
      ex_->phase = Exchange::Phase::kStreaming;
    }
    loop_->Wake(conn_);
    return true;
  }

  bool WriteChunk(std::string data) override {
    {
      std::unique_lock<std::mutex> lock(conn_->mu);
      conn_->drained.wait(lock, [this] {
        return conn_->closed || conn_->UnsentLocked() <= kHighWater;
      });
      if (!AppendChunkLocked(data)) return false;
    }
    loop_->Wake(conn_);
    return true;
  }

  bool QueueChunk(std::string data) override {
    {
      std::lock_guard<std::mutex> lock(conn_->mu);
      if (!AppendChunkLocked(data)) return false;
    }
    loop_->Wake(conn_);
    return true;
  }

  void OnWritable(std::function<void()> callback) override {
    std::vector<std::function<void()>> due;
    {
      std::lock_guard<std::mutex> lock(conn_->mu);
      conn_->on_writable.push_back(std::move(callback));
      due = conn_->TakeWritableLocked();
    }
    for (auto& run : due) run();
  }

  bool EndStream() override {
    {
      std::lock_guard<std::mutex> lock(conn_->mu);
      if (conn_->closed || ex_->phase != Exchange::Phase::kStreaming) return false;
      if (!ex_->http10 && !ex_->head) conn_->QueueOutputLocked("0\r\n\r\n");
      ex_->phase = Exchange::Phase::kDone;
    }
    loop_->Wake(conn_);
    return true;
  }

  void OnClose(std::function<void()> callback) override {
    {
      std::lock_guard<std::mutex> lock(conn_->mu);
      if (ex_->on_close_done || ex_->phase == Exchange::Phase::kDone) return;
      if (!conn_->closed) {
        ex_->on_close = std::move(callback);
        return;
      }
      ex_->on_close_done = true;
    }
    callback();
  }

  bool closed() const override {
    std::lock_guard<std::mutex> lock(conn_->mu);
    return conn_->closed;
  }

 private:
  // Appends `data` as one chunk of the streaming response; needs conn_->mu.
  bool AppendChunkLocked(const std::string& data) {
    if (conn_->closed || ex_->phase != Exchange::Phase::kStreaming) return false;
    if (data.empty() || ex_->head) return true;  // an empty chunk would end the stream
    if (ex_->http10) {
      conn_->QueueOutputLocked(data);
    } else {
      conn_->QueueOutputLocked(absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n"));
    }
    return true;
  }

  const std::shared_ptr<Loop> loop_;
  const std::shared_ptr<Connection> conn_;
  const std::shared_ptr<Exchange> ex_;
};

}  // namespace

std::shared_ptr<ResponseWriter> MakeWriter(std::shared_ptr<Loop> loop,
                                           std::shared_ptr<Connection> conn,
                                           std::shared_ptr<Exchange> ex) {
  return std::make_shared<Writer>(std::move(loop), std::move(conn), std::move(ex));
}

}  // namespace blossom::http::internal
