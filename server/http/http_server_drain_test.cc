// Server::Drain: a graceful shutdown lets clients read what they were already sent in part (the
// end of a stream, its terminating chunk) before Stop() closes the connections.
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/http/http_server.h"
#include "server/http/test_client.h"

namespace blossom::http {
namespace {

using ::blossom::http::testing::Client;
using Ms = std::chrono::milliseconds;

constexpr size_t kStreamBytes = 4 << 20;
// A stream no kernel can hold for a client that never reads: Linux autotunes a loopback
// socket's send buffer up to net.ipv4.tcp_wmem's maximum (4 MiB on Debian 12), which swallowed
// the whole 4 MiB stream about 4 runs in 10 on one VM, leaving nothing for Drain to wait for.
constexpr size_t kStalledStreamBytes = 32 << 20;
const char kLastEvent[] = "data: [DONE]\n\n";

// /stream: an event stream of `bytes` queued at once (most of it unsent while the client reads
// slowly), then [DONE]; `ended` is set once the handler has finished. Else "ok".
Handler StreamHandler(std::promise<void>* ended, size_t bytes = kStreamBytes) {
  return [ended, bytes](const Request& req, std::shared_ptr<ResponseWriter> writer) {
    if (req.path != "/stream") {
      writer->Send(Response{200, {}, "ok"});
      return;
    }
    writer->StartStream(200, {{"Content-Type", "text/event-stream"}});
    for (size_t sent = 0; sent < bytes; sent += 64 << 10) {
      writer->QueueChunk(std::string(64 << 10, 'x'));
    }
    writer->QueueChunk(kLastEvent);
    writer->EndStream();
    ended->set_value();
  };
}

std::unique_ptr<Server> StartServer(Handler handler) {
  auto server = Server::Start({}, std::move(handler));
  EXPECT_TRUE(server.ok()) << server.status();
  return std::move(*server);
}

TEST(HttpServerDrainTest, SlowReaderGetsTheWholeStreamBeforeStop) {
  std::promise<void> ended;
  auto server = StartServer(StreamHandler(&ended));
  Client client(server->port(), nullptr, 64 << 10);
  ASSERT_TRUE(client.Send("GET /stream HTTP/1.1\r\n\r\n"));
  ended.get_future().wait();  // the gateway's drain: no call in flight, output still queued
  std::thread reader([&client] {
    while (client.FillUpTo(64 << 10) > 0) std::this_thread::sleep_for(Ms(10));  // until EOF
  });
  const absl::Status drained = server->Drain(absl::Now() + absl::Seconds(30));
  EXPECT_TRUE(drained.ok()) << drained;
  server->Stop();
  reader.join();
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body.size(), kStreamBytes + sizeof(kLastEvent) - 1);
  ASSERT_FALSE(reply.chunks.empty());
  EXPECT_TRUE(reply.chunks.back() == kLastEvent) << "the end of the stream is missing";
  EXPECT_TRUE(reply.ended) << "no terminating chunk";
}

TEST(HttpServerDrainTest, StopsAcceptingAndGivesUpAtTheDeadline) {
  std::promise<void> ended;
  auto server = StartServer(StreamHandler(&ended, kStalledStreamBytes));
  Client stalled(server->port(), nullptr, 64 << 10);
  ASSERT_TRUE(stalled.Send("GET /stream HTTP/1.1\r\n\r\n"));  // and never read
  ended.get_future().wait();
  const auto start = std::chrono::steady_clock::now();
  const absl::Status drained = server->Drain(absl::Now() + absl::Milliseconds(300));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(drained.code(), absl::StatusCode::kDeadlineExceeded) << drained;
  EXPECT_GE(waited, 0.25);
  EXPECT_LT(waited, 5.0);
  Client late(server->port());
  EXPECT_FALSE(late.connected()) << "still accepting";
  server->Stop();
  EXPECT_EQ(server->Drain(absl::Now() + absl::Seconds(1)).code(),
            absl::StatusCode::kFailedPrecondition);
}

// A response in flight when the drain starts is finished, with "Connection: close" so that the
// client does not send the next request there; idle keep-alive connections do not hold it up.
TEST(HttpServerDrainTest, WaitsForTheExchangeInFlightAndClosesItsConnection) {
  std::promise<void> started, release;
  std::shared_future<void> released = release.get_future().share();
  auto server = StartServer([&](const Request& req, std::shared_ptr<ResponseWriter> writer) {
    if (req.path == "/slow") {
      started.set_value();
      released.wait();
    }
    writer->Send(Response{200, {}, "ok"});
  });
  Client idle(server->port());
  ASSERT_TRUE(idle.Send("GET / HTTP/1.1\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(idle.ReadReply(&reply));
  Client busy(server->port());
  ASSERT_TRUE(busy.Send("GET /slow HTTP/1.1\r\n\r\n"));
  started.get_future().wait();
  absl::Status drained;
  std::thread drain([&] { drained = server->Drain(absl::Now() + absl::Seconds(30)); });
  std::this_thread::sleep_for(Ms(100));
  release.set_value();
  reply = Client::Reply();
  ASSERT_TRUE(busy.ReadReply(&reply));
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.headers["connection"], "close");
  EXPECT_TRUE(busy.WaitClosed());
  drain.join();
  EXPECT_TRUE(drained.ok()) << drained;
}

// EndKeepAlive, a drain's first step while requests still come: new connections are served,
// and from then on every response closes its connection, also those of exchanges already in
// flight (a stream closes its connection once it ends) and of idle keep-alive connections.
TEST(HttpServerDrainTest, EndKeepAliveClosesEveryConnectionAfterItsResponse) {
  std::promise<void> slow_started, stream_started, release;
  std::shared_future<void> released = release.get_future().share();
  auto server = StartServer([&](const Request& req, std::shared_ptr<ResponseWriter> writer) {
    if (req.path == "/slow") {
      slow_started.set_value();
      released.wait();
    } else if (req.path == "/stream") {
      writer->StartStream(200, {{"Content-Type", "text/event-stream"}});
      writer->QueueChunk("data: 1\n\n");
      stream_started.set_value();
      released.wait();
      writer->QueueChunk(kLastEvent);
      writer->EndStream();
      return;
    }
    writer->Send(Response{200, {}, "ok"});
  });
  Client idle(server->port());
  ASSERT_TRUE(idle.Send("GET / HTTP/1.1\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(idle.ReadReply(&reply));
  EXPECT_EQ(reply.headers.count("connection"), 0u) << "keep-alive before";
  Client slow(server->port()), stream(server->port());
  ASSERT_TRUE(slow.Send("GET /slow HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(stream.Send("GET /stream HTTP/1.1\r\n\r\n"));
  slow_started.get_future().wait();
  stream_started.get_future().wait();
  Client::Reply stream_reply;
  ASSERT_TRUE(stream.ReadHead(&stream_reply));

  server->EndKeepAlive();
  Client fresh(server->port());
  ASSERT_TRUE(fresh.Send("GET / HTTP/1.1\r\n\r\n")) << "still accepting";
  reply = Client::Reply();
  ASSERT_TRUE(fresh.ReadReply(&reply));
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.headers["connection"], "close");
  EXPECT_TRUE(fresh.WaitClosed());
  ASSERT_TRUE(idle.Send("GET / HTTP/1.1\r\n\r\n"));
  reply = Client::Reply();
  ASSERT_TRUE(idle.ReadReply(&reply));
  EXPECT_EQ(reply.headers["connection"], "close");
  EXPECT_TRUE(idle.WaitClosed());

  release.set_value();
  reply = Client::Reply();
  ASSERT_TRUE(slow.ReadReply(&reply));
  EXPECT_EQ(reply.headers["connection"], "close") << "an exchange in flight, not started";
  EXPECT_TRUE(slow.WaitClosed());
  ASSERT_TRUE(stream.ReadBody(&stream_reply));
  EXPECT_TRUE(stream_reply.ended) << "the stream ends whole";
  EXPECT_TRUE(stream.WaitClosed()) << "then its connection closes";
  server->Stop();
}

}  // namespace
}  // namespace blossom::http
