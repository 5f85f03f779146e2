// The HTTP client's transport: the deadline bounds a connect to a host that drops SYNs, a send
// to a server that does not read, and reads from one that trickles bytes forever; plus the
// chunked-coding decoder and target parsing.
#include "benchmarks/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "gtest/gtest.h"

namespace blossom {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A loopback listener that never accepts; `backlog` as listen() takes it.
class Listener {
 public:
  explicit Listener(int backlog) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_, backlog), 0);
    socklen_t len = sizeof(a);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    address_.family = AF_INET;
    address_.length = sizeof(sockaddr_in);
    std::memcpy(&address_.address, &a, sizeof(a));
  }
  ~Listener() { close(fd_); }
  int fd() const { return fd_; }
  const SocketAddress& address() const { return address_; }

 private:
  int fd_ = -1;
  SocketAddress address_;
};

TEST(DeadlineTest, NoneWaitsForeverAndAfterCountsDown) {
  EXPECT_TRUE(Deadline::None().none());
  EXPECT_EQ(Deadline::None().PollMs(), -1);
  EXPECT_FALSE(Deadline::None().expired());
  EXPECT_TRUE(Deadline::After(0).none());  // --request-timeout 0: no deadline
  EXPECT_TRUE(Deadline::After(-1).none());
  const Deadline d = Deadline::After(0.05);
  EXPECT_FALSE(d.none());
  EXPECT_GT(d.PollMs(), 0);
  EXPECT_LE(d.PollMs(), 50);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(d.PollMs(), 0);
  EXPECT_GT(Deadline::After(1e30).PollMs(), 0);  // clamped, no overflow
}

// A listener with a full accept queue drops new SYNs, as a firewalled host does: a blocking
// connect() would wait the kernel's ~2 minutes; the deadline must end it.
TEST(HttpConnectionTest, ConnectToAHostDroppingSynsEndsAtTheDeadline) {
  Listener listener(/*backlog=*/0);
  std::vector<int> fillers;
  bool full = false;
  for (int i = 0; i < 16 && !full; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    connect(fd, reinterpret_cast<const sockaddr*>(&listener.address().address),
            listener.address().length);
    pollfd p{fd, POLLOUT, 0};
    full = poll(&p, 1, 200) == 0;  // still connecting: the queue is full
    fillers.push_back(fd);
  }
  if (!full) {
    for (int fd : fillers) close(fd);
    GTEST_SKIP() << "this kernel accepted every connection; no SYN was dropped";
  }
  HttpConnection connection;
  const auto start = Clock::now();
  const absl::Status s = connection.Connect({listener.address()}, Deadline::After(0.3));
  const double took = SecondsSince(start);
  for (int fd : fillers) close(fd);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(s.message(), "connecting");
  EXPECT_GE(took, 0.25);
  EXPECT_LT(took, 5.0);
}

TEST(HttpConnectionTest, RefusedConnectionIsUnavailable) {
  SocketAddress closed;
  {
    Listener listener(1);
    closed = listener.address();
  }
  HttpConnection connection;
  const absl::Status s = connection.Connect({closed}, Deadline::After(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

// A server that never reads: once the socket buffers are full, a blocking send would wait for
// ever; the deadline must end it.
TEST(HttpConnectionTest, SendToAServerThatDoesNotReadEndsAtTheDeadline) {
  Listener listener(4);  // connections complete in the accept queue, nobody reads them
  HttpConnection connection;
  ASSERT_TRUE(connection.Connect({listener.address()}, Deadline::After(5)).ok());
  const std::string big(64 << 20, 'x');
  const auto start = Clock::now();
  const absl::Status s = connection.SendAll(big, Deadline::After(0.3));
  const double took = SecondsSince(start);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(s.message(), "sending the request");
  EXPECT_LT(took, 5.0);
}

// Bytes every 20 ms never leave a read waiting for long, so a per-read timeout would never
// fire: the whole request's deadline must.
TEST(HttpConnectionTest, ReadsEndAtTheDeadlineWhileBytesKeepComing) {
  Listener listener(4);
  std::atomic<bool> stop{false};
  std::thread peer([&] {
    const int fd = accept(listener.fd(), nullptr, nullptr);
    while (!stop.load() && send(fd, "x", 1, MSG_NOSIGNAL) == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    close(fd);
  });
  HttpConnection connection;
  ASSERT_TRUE(connection.Connect({listener.address()}, Deadline::After(5)).ok());
  const Deadline deadline = Deadline::After(0.3);
  const auto start = Clock::now();
  std::string got;
  absl::StatusOr<bool> more = true;
  while (more.ok() && *more && SecondsSince(start) < 5) more = connection.Receive(&got, deadline);
  const double took = SecondsSince(start);
  stop = true;
  peer.join();
  EXPECT_EQ(more.status().code(), absl::StatusCode::kDeadlineExceeded) << more.status();
  EXPECT_FALSE(got.empty());
  EXPECT_LT(took, 2.0);
}

TEST(HostResolverTest, ResolvesOnceAndKeepsTheAnswer) {
  HttpTarget target;
  target.host = "127.0.0.1";
  target.port = 8080;
  HostResolver resolver(target);
  auto first = resolver.Resolve(Deadline::After(10));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_FALSE((*first)->empty());
  EXPECT_EQ((*first)->front().family, AF_INET);
  auto second = resolver.Resolve(Deadline::None());
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->get(), second->get());
}

TEST(ChunkedDecoderTest, DecodesAcrossFeedsAndRejectsGarbage) {
  ChunkedDecoder decoder;
  std::string out;
  ASSERT_TRUE(decoder.Feed("5\r\nhel", &out));
  ASSERT_TRUE(decoder.Feed("lo\r\nA;ext=1\r\n0123456789\r\n", &out));
  EXPECT_FALSE(decoder.done());
  ASSERT_TRUE(decoder.Feed("0\r\n\r\n", &out));
  EXPECT_TRUE(decoder.done());
  EXPECT_EQ(out, "hello0123456789");
  ChunkedDecoder bad;
  EXPECT_FALSE(bad.Feed("zz\r\n", &out));
}

TEST(ParseHttpTargetTest, HostPortAndPrefix) {
  auto t = ParseHttpTarget("http://127.0.0.1:8080");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "127.0.0.1");
  EXPECT_EQ(t->port, 8080);
  EXPECT_EQ(t->path_prefix, "");
  t = ParseHttpTarget("http://localhost/api/");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->port, 80);
  EXPECT_EQ(t->path_prefix, "/api");
  t = ParseHttpTarget("http://[::1]:9000");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "::1");
  EXPECT_EQ(t->port, 9000);
  EXPECT_FALSE(ParseHttpTarget("grpc://x:1").ok());
  EXPECT_FALSE(ParseHttpTarget("http://x:0").ok());
}

}  // namespace
}  // namespace blossom
