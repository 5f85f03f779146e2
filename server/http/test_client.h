// A blocking raw-socket HTTP/1.1 client for tests: byte-exact response reading (status line,
// headers, Content-Length / chunked / read-to-close bodies, single chunks). Not thread-safe.
#ifndef BLOSSOM_SERVER_HTTP_TEST_CLIENT_H_
#define BLOSSOM_SERVER_HTTP_TEST_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace blossom::http::testing {

inline constexpr int kTimeoutMs = 10000;

// A blocking raw-socket HTTP client that reads responses byte-exactly.
class Client {
 public:
  struct Reply {
    int status = 0;
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;
    std::vector<std::string> chunks;
    bool ended = false;  // a chunked body's last chunk arrived (not cut off)
  };

  // Connects to 127.0.0.1:port, from `source_ip` (another loopback address such as
  // "127.0.0.2", to look like a different client) when given, with a receive buffer of
  // `receive_buffer` bytes when given (a small one makes a slow reader slow the sender at once).
  explicit Client(int port, const char* source_ip = nullptr, int receive_buffer = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (receive_buffer > 0) {
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
    }
    if (source_ip != nullptr) {
      sockaddr_in source{};
      source.sin_family = AF_INET;
      inet_pton(AF_INET, source_ip, &source.sin_addr);
      if (bind(fd_, reinterpret_cast<sockaddr*>(&source), sizeof(source)) != 0) return;
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Client() { Close(); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  bool connected() const { return connected_; }

  bool Send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads more bytes into the buffer; false on EOF, error or timeout.
  bool Fill() {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, kTimeoutMs) <= 0) return false;
    char buf[16384];
    ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    buf_.append(buf, static_cast<size_t>(n));
    return true;
  }

  // Reads at most `max` more bytes into the buffer (one recv); how many: 0 on EOF, error or
  // timeout.
  size_t FillUpTo(size_t max) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, kTimeoutMs) <= 0) return 0;
    std::string buf(max, '\0');
    ssize_t n = recv(fd_, buf.data(), max, 0);
    if (n <= 0) return 0;
    buf_.append(buf.data(), static_cast<size_t>(n));
    return static_cast<size_t>(n);
  }
  size_t buffered() const { return buf_.size(); }

  // Whether anything (bytes, EOF or a reset) arrives within `ms` milliseconds.
  bool ReadableWithin(int ms) {
    if (!buf_.empty()) return true;
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, ms) > 0;
  }

  bool ReadLine(std::string* line) {
    size_t eol;
    while ((eol = buf_.find("\r\n")) == std::string::npos) {
      if (!Fill()) return false;
    }
    *line = buf_.substr(0, eol);
    buf_.erase(0, eol + 2);
    return true;
  }

  bool ReadExactly(size_t n, std::string* out) {
    while (buf_.size() < n) {
      if (!Fill()) return false;
    }
    *out = buf_.substr(0, n);
    buf_.erase(0, n);
    return true;
  }

  // Reads status line and headers only.
  bool ReadHead(Reply* reply) {
    std::string line;
    if (!ReadLine(&line)) return false;
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 2));
    if (parts.size() < 2 || !absl::SimpleAtoi(parts[1], &reply->status)) return false;
    for (;;) {
      if (!ReadLine(&line)) return false;
      if (line.empty()) return true;
      size_t colon = line.find(':');
      reply->headers[absl::AsciiStrToLower(line.substr(0, colon))] =
          std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }

  // Reads one chunk of a chunked body; false at the terminating chunk or on error.
  bool ReadChunk(std::string* chunk) {
    std::string line;
    if (!ReadLine(&line)) return false;
    size_t size = std::stoul(line, nullptr, 16);
    if (size == 0) {
      last_chunk_ = ReadLine(&line) && line.empty();  // the empty line after the last chunk
      return false;
    }
    std::string crlf;
    return ReadExactly(size, chunk) && ReadExactly(2, &crlf);
  }

  bool ReadReply(Reply* reply) { return ReadHead(reply) && ReadBody(reply); }

  // The body of a reply whose head was read.
  bool ReadBody(Reply* reply) {
    if (reply->headers.count("transfer-encoding")) {
      std::string chunk;
      last_chunk_ = false;
      while (ReadChunk(&chunk)) {
        reply->chunks.push_back(chunk);
        reply->body += chunk;
      }
      reply->ended = last_chunk_;
      return true;
    }
    if (reply->headers.count("content-length")) {
      return ReadExactly(std::stoul(reply->headers["content-length"]), &reply->body);
    }
    while (Fill()) {
    }
    reply->body = std::move(buf_);
    buf_.clear();
    return true;
  }

  // Like ReadReply, but skips interim (1xx) responses.
  bool ReadFinalReply(Reply* reply) {
    for (;;) {
      *reply = Reply();
      if (!ReadHead(reply)) return false;
      if (reply->status >= 200) break;
    }
    return ReadBody(reply);
  }

  // Sends FIN: the client will send nothing more but still reads.
  void ShutdownWrite() { shutdown(fd_, SHUT_WR); }

  // True if the server closes the connection (EOF or reset) within the timeout, with no
  // unread data left.
  bool WaitClosed() {
    while (Fill()) {
    }
    char c;
    errno = 0;
    ssize_t n = recv(fd_, &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
  bool last_chunk_ = false;  // ReadChunk saw the last chunk
};

}  // namespace blossom::http::testing

#endif  // BLOSSOM_SERVER_HTTP_TEST_CLIENT_H_
