#include "benchmarks/http_connection.h"

#include <netdb.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace blossom {
namespace {

// A longer deadline is as good as none, and steady_clock's nanoseconds would overflow past ~292
// years.
constexpr double kMaxDeadlineS = 1e8;

// True once `fd` is ready for `events` (or has an error or hangup, which the next call on it
// reports), false when the deadline passed first.
absl::StatusOr<bool> WaitFor(int fd, short events, const Deadline& deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, deadline.PollMs());
    if (rc > 0) return true;
    if (rc == 0) {
      if (deadline.expired()) return false;
      continue;  // the capped wait of a far deadline ran out
    }
    if (errno != EINTR) return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
  }
}

}  // namespace

Deadline Deadline::After(double seconds) {
  Deadline d;
  if (!(seconds > 0)) return d;
  d.none_ = false;
  d.at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(std::min(seconds, kMaxDeadlineS)));
  return d;
}

int Deadline::PollMs() const {
  if (none_) return -1;
  const auto left = at_ - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const double ms = std::ceil(std::chrono::duration<double, std::milli>(left).count());
  return static_cast<int>(std::min(ms, static_cast<double>(INT_MAX)));
}

absl::StatusOr<HttpTarget> ParseHttpTarget(const std::string& target) {
  if (!absl::StartsWith(target, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat("--target '", target, "': expected http://..."));
  }
  std::string rest = target.substr(7);
  HttpTarget out;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    out.path_prefix = rest.substr(slash);
    rest = rest.substr(0, slash);
    while (!out.path_prefix.empty() && out.path_prefix.back() == '/') out.path_prefix.pop_back();
  }
  size_t colon = rest.rfind(':');
  if (!rest.empty() && rest[0] == '[') {  // [v6]:port
    const size_t close = rest.find(']');
    if (close == std::string::npos) return absl::InvalidArgumentError("bad IPv6 host in --target");
    out.host = rest.substr(1, close - 1);
    colon = rest.find(':', close);
  } else {
    out.host = rest.substr(0, colon);
  }
  if (colon != std::string::npos) {
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &out.port) || out.port <= 0 || out.port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("--target '", target, "': bad port"));
    }
  }
  if (out.host.empty()) return absl::InvalidArgumentError("--target has no host");
  return out;
}

struct HostResolver::Lookup {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // the fields below are final once set; guarded by mu until then
  int rc = 0;
  std::vector<SocketAddress> addresses;
};

absl::StatusOr<std::shared_ptr<const std::vector<SocketAddress>>> HostResolver::Resolve(
    Deadline deadline) {
  std::shared_ptr<Lookup> lookup;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (addresses_ != nullptr) return addresses_;
    if (lookup_ == nullptr) {
      lookup_ = std::make_shared<Lookup>();
      std::thread([lookup = lookup_, host = target_.host, port = std::to_string(target_.port)] {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* list = nullptr;
        const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &list);
        std::vector<SocketAddress> found;
        for (addrinfo* a = rc == 0 ? list : nullptr; a != nullptr; a = a->ai_next) {
          if (a->ai_addrlen > sizeof(sockaddr_storage)) continue;
          SocketAddress s;
          s.family = a->ai_family;
          s.length = a->ai_addrlen;
          std::memcpy(&s.address, a->ai_addr, a->ai_addrlen);
          found.push_back(s);
        }
        if (list != nullptr) freeaddrinfo(list);
        std::lock_guard<std::mutex> done_lock(lookup->mu);
        lookup->rc = rc;
        lookup->addresses = std::move(found);
        lookup->done = true;
        lookup->cv.notify_all();
      }).detach();
    }
    lookup = lookup_;
  }
  {
    std::unique_lock<std::mutex> lock(lookup->mu);
    const auto done = [&] { return lookup->done; };
    if (deadline.none()) {
      lookup->cv.wait(lock, done);
    } else if (!lookup->cv.wait_until(lock, deadline.at(), done)) {
      return absl::DeadlineExceededError(absl::StrCat("resolving ", target_.host));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (lookup_ == lookup) lookup_.reset();  // done: a failure is asked again next time
  if (lookup->rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("resolve ", target_.host, ": ", gai_strerror(lookup->rc)));
  }
  if (lookup->addresses.empty()) {
    return absl::UnavailableError(absl::StrCat("resolve ", target_.host, ": no address"));
  }
  if (addresses_ == nullptr) {
    addresses_ = std::make_shared<const std::vector<SocketAddress>>(lookup->addresses);
  }
  return addresses_;
}

HttpConnection::~HttpConnection() {
  if (fd_ >= 0) close(fd_);
}

absl::Status HttpConnection::Connect(const std::vector<SocketAddress>& addresses,
                                     Deadline deadline) {
  std::string last_error = "no address to connect to";
  for (const SocketAddress& a : addresses) {
    if (deadline.expired()) break;
    const int fd = socket(a.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    // Non-blocking, so a host that drops SYNs costs at most the request's deadline instead of
    // the kernel's connect timeout (~2 minutes with the default 6 SYN retries).
    const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&a.address), a.length);
    // EINTR on a non-blocking connect: the connection still proceeds asynchronously.
    if (rc < 0 && errno != EINPROGRESS && errno != EINTR) {
      last_error = std::strerror(errno);
      close(fd);
      continue;
    }
    if (rc < 0) {
      absl::StatusOr<bool> ready = WaitFor(fd, POLLOUT, deadline);
      if (!ready.ok() || !*ready) {
        close(fd);
        if (!ready.ok()) return ready.status();
        return absl::DeadlineExceededError("connecting");
      }
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
      if (err != 0) {
        last_error = std::strerror(err);
        close(fd);
        continue;
      }
    }
    fd_ = fd;
    return absl::OkStatus();
  }
  if (deadline.expired()) return absl::DeadlineExceededError("connecting");
  return absl::UnavailableError(last_error);
}

absl::Status HttpConnection::SendAll(const std::string& data, Deadline deadline) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // The server is not reading (its socket buffers are full): wait, but not past the deadline.
      absl::StatusOr<bool> ready = WaitFor(fd_, POLLOUT, deadline);
      if (!ready.ok()) return ready.status();
      if (!*ready) return absl::DeadlineExceededError("sending the request");
      continue;
    }
    return absl::UnavailableError(std::strerror(n < 0 ? errno : EPIPE));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> HttpConnection::Receive(std::string* out, Deadline deadline) {
  // Checked before reading, not only when a read would wait: a server that trickles bytes
  // without pause must still fail at the deadline.
  if (deadline.expired()) return absl::DeadlineExceededError("receiving the response");
  for (;;) {
    char buf[16384];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n >= 0) {
      out->append(buf, static_cast<size_t>(n));
      return n > 0;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(std::strerror(errno));
    }
    absl::StatusOr<bool> ready = WaitFor(fd_, POLLIN, deadline);
    if (!ready.ok()) return ready.status();
    if (!*ready) return absl::DeadlineExceededError("receiving the response");
  }
}

bool ChunkedDecoder::Feed(const std::string& bytes, std::string* out) {
  size_t i = 0;
  while (i < bytes.size() && state_ != State::kDone) {
    if (state_ == State::kData) {
      const size_t take = std::min(remaining_, bytes.size() - i);
      out->append(bytes, i, take);
      i += take;
      remaining_ -= take;
      if (remaining_ == 0) state_ = State::kDataEnd;
      continue;
    }
    const char c = bytes[i++];
    if (c != '\n') {
      line_.push_back(c);
      if (line_.size() > 4096) return false;
      continue;
    }
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    std::string line;
    line.swap(line_);
    if (state_ == State::kSize) {
      const std::string hex = line.substr(0, line.find(';'));  // drop chunk extensions
      size_t size = 0;
      if (hex.empty()) return false;
      for (char h : hex) {
        const int v = absl::ascii_isdigit(static_cast<unsigned char>(h))
                          ? h - '0'
                          : (absl::ascii_isxdigit(static_cast<unsigned char>(h))
                                 ? absl::ascii_tolower(static_cast<unsigned char>(h)) - 'a' + 10
                                 : -1);
        if (v < 0 || size > (SIZE_MAX >> 4)) return false;
        size = size * 16 + static_cast<size_t>(v);
      }
      remaining_ = size;
      state_ = size == 0 ? State::kTrailer : State::kData;
    } else if (state_ == State::kDataEnd) {
      if (!line.empty()) return false;
      state_ = State::kSize;
    } else if (state_ == State::kTrailer) {
      if (line.empty()) state_ = State::kDone;
    }
  }
  return true;
}

absl::Status ResponseReader::ReadHead() {
  size_t end;
  while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
    if (buffer_.size() > (64 << 10)) return absl::InternalError("response head too large");
    auto more = connection_->Receive(&buffer_, deadline_);
    if (!more.ok()) return more.status();
    if (!*more) return absl::UnavailableError("connection closed before the response head");
  }
  const std::string head = buffer_.substr(0, end);
  buffer_.erase(0, end + 4);
  std::vector<std::string> lines = absl::StrSplit(head, "\r\n");
  std::vector<std::string> status_line = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/1.") ||
      !absl::SimpleAtoi(status_line[1], &status_)) {
    return absl::InternalError(absl::StrCat("bad status line '", lines[0].substr(0, 100), "'"));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    const std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
    const std::string value(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    if (name == "transfer-encoding" && absl::StrContains(absl::AsciiStrToLower(value), "chunked")) {
      chunked_ = true;
    } else if (name == "content-length") {
      int64_t n = 0;
      if (absl::SimpleAtoi(value, &n) && n >= 0) content_length_ = n;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ResponseReader::Next(std::string* out) {
  out->clear();
  while (out->empty()) {
    if (finished_) return false;
    if (buffer_.empty()) {
      auto more = connection_->Receive(&buffer_, deadline_);
      if (!more.ok()) return more.status();
      if (!*more) {
        if (chunked_ || (content_length_ >= 0 && received_ < content_length_)) {
          return absl::UnavailableError("connection closed mid-body");
        }
        finished_ = true;  // read-to-close body
        return false;
      }
    }
    std::string raw;
    raw.swap(buffer_);
    if (chunked_) {
      if (!decoder_.Feed(raw, out)) return absl::InternalError("malformed chunked body");
      if (decoder_.done()) finished_ = true;
    } else if (content_length_ >= 0) {
      const size_t take =
          std::min<size_t>(raw.size(), static_cast<size_t>(content_length_ - received_));
      out->append(raw, 0, take);
      received_ += static_cast<int64_t>(take);
      if (received_ == content_length_) finished_ = true;
    } else {
      *out = std::move(raw);
    }
  }
  return true;
}

}  // namespace blossom
