// Black-box tests over sockets of how the HTTP server treats slow, half-closed and odd clients
// (issue 14): deadlines, eviction at the connection limit, the per-address cap, half-close,
// absolute-form targets, heads split across reads, slow readers of large responses.
// They talk raw HTTP, so they hold for any implementation of http::Server.
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/http/http_server.h"
#include "server/http/test_client.h"

namespace blossom::http {
namespace {

using ::blossom::http::testing::Client;
using Ms = std::chrono::milliseconds;

void EchoHandler(const Request& req, std::shared_ptr<ResponseWriter> writer) {
  writer->Send(Response{200, {{"Content-Type", "text/plain"}},
                        absl::StrCat(req.method, " ", req.path, " ", req.query, " ", req.body)});
}

std::unique_ptr<Server> StartServer(Handler handler, ServerOptions options = {}) {
  auto server = Server::Start(options, std::move(handler));
  EXPECT_TRUE(server.ok()) << server.status();
  return std::move(*server);
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(HttpServerRobustnessTest, TricklingHeadGets408AtTheDeadline) {
  ServerOptions options;
  options.header_timeout_ms = 400;
  auto server = StartServer(EchoHandler, options);
  Client client(server->port());
  const auto start = std::chrono::steady_clock::now();
  // One byte every 100 ms: each byte would reset an idle timer, never the head deadline.
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    const std::string head = "GET /slow HTTP/1.1\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    for (size_t i = 0; i < head.size() && !stop; ++i) {
      if (!client.Send(head.substr(i, 1))) break;
      std::this_thread::sleep_for(Ms(100));
    }
  });
  Client::Reply reply;
  const bool got = client.ReadReply(&reply);
  stop = true;
  trickle.join();
  ASSERT_TRUE(got);
  EXPECT_EQ(reply.status, 408);
  EXPECT_LT(SecondsSince(start), 3.0);
}

TEST(HttpServerRobustnessTest, PartialRequestLineAndShortBodyGet408) {
  ServerOptions options;
  options.header_timeout_ms = 300;
  options.body_timeout_ms = 300;
  auto server = StartServer(EchoHandler, options);
  for (const char* request : {"GET /li", "POST /e HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc",
                              "POST /e HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"}) {
    Client client(server->port());
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(client.Send(request));
    Client::Reply reply;
    ASSERT_TRUE(client.ReadReply(&reply)) << request;
    EXPECT_EQ(reply.status, 408) << request;
    EXPECT_LT(SecondsSince(start), 3.0) << request;
    EXPECT_TRUE(client.WaitClosed()) << request;
  }
}

TEST(HttpServerRobustnessTest, BareLfRequestGets400AtOnce) {
  auto server = StartServer(EchoHandler);
  Client client(server->port());
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(client.Send("GET /live HTTP/1.1\nHost: x\n\n"));
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 400);
  EXPECT_TRUE(absl::StrContains(reply.body, "bare LF")) << reply.body;
  EXPECT_LT(SecondsSince(start), 2.0);
}

TEST(HttpServerRobustnessTest, Http10ChunkedIsRefused) {
  auto server = StartServer(EchoHandler);
  Client client(server->port());
  ASSERT_TRUE(client.Send("POST /e HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 400);
}

TEST(HttpServerRobustnessTest, AbsoluteFormTargetIsServed) {
  auto server = StartServer(EchoHandler);
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET http://example.com/live?x=1 HTTP/1.1\r\nHost: example.com\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "GET /live x=1 ");
}

// Many clients trickling request heads, more than max_connections, must not lock out a
// client that sends its requests promptly.
TEST(HttpServerRobustnessTest, SlowClientsDoNotLockOutAPromptOne) {
  ServerOptions options;
  options.max_connections = 16;
  options.header_timeout_ms = 1000;
  auto server = StartServer(EchoHandler, options);
  std::atomic<bool> stop{false};
  std::thread attacker([&] {
    std::vector<std::unique_ptr<Client>> slow;
    while (!stop) {
      // Two new connections per round; each sends a byte per round, never finishing a head.
      for (int i = 0; i < 2; ++i) slow.push_back(std::make_unique<Client>(server->port()));
      std::vector<std::unique_ptr<Client>> alive;
      for (auto& c : slow) {
        if (c->Send("G")) alive.push_back(std::move(c));
      }
      slow = std::move(alive);
      std::this_thread::sleep_for(Ms(20));
    }
  });
  std::this_thread::sleep_for(Ms(300));  // the slow clients fill every slot
  int ok = 0;
  for (int i = 0; i < 20; ++i) {
    Client client(server->port());
    ASSERT_TRUE(client.Send("GET /live HTTP/1.1\r\n\r\n"));
    Client::Reply reply;
    if (client.ReadReply(&reply) && reply.status == 200) ++ok;
    std::this_thread::sleep_for(Ms(50));
  }
  stop = true;
  attacker.join();
  EXPECT_EQ(ok, 20);
}

TEST(HttpServerRobustnessTest, RefusesWith503OnlyWhenEveryConnectionIsBusy) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  ServerOptions options;
  options.max_connections = 2;
  auto server = StartServer(
      [released](const Request& req, std::shared_ptr<ResponseWriter> writer) {
        if (req.path == "/busy") released.wait();
        writer->Send(Response{200, {}, "ok"});
      },
      options);
  {
    // Two idle keep-alive connections: a third client evicts the one idle longest.
    Client a(server->port()), b(server->port());
    for (Client* c : {&a, &b}) {
      ASSERT_TRUE(c->Send("GET / HTTP/1.1\r\n\r\n"));
      Client::Reply reply;
      ASSERT_TRUE(c->ReadReply(&reply));
      std::this_thread::sleep_for(Ms(20));  // a has been idle longer than b
    }
    Client c(server->port());
    ASSERT_TRUE(c.Send("GET / HTTP/1.1\r\n\r\n"));
    Client::Reply reply;
    ASSERT_TRUE(c.ReadReply(&reply));
    EXPECT_EQ(reply.status, 200);
    EXPECT_TRUE(a.WaitClosed());
  }
  std::this_thread::sleep_for(Ms(100));  // the server notices the closed clients
  Client a(server->port()), b(server->port());
  for (Client* c : {&a, &b}) ASSERT_TRUE(c->Send("GET /busy HTTP/1.1\r\n\r\n"));
  std::this_thread::sleep_for(Ms(200));
  Client c(server->port());
  Client::Reply reply;
  ASSERT_TRUE(c.ReadReply(&reply));
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.headers["retry-after"], "1");  // the slots free up as responses end
  release.set_value();
  for (Client* x : {&a, &b}) {
    ASSERT_TRUE(x->ReadReply(&reply));
    EXPECT_EQ(reply.status, 200);
  }
}

TEST(HttpServerRobustnessTest, PerAddressCapRefusesOnlyThatAddress) {
  ServerOptions options;
  options.max_connections_per_ip = 2;
  auto server = StartServer(EchoHandler, options);
  auto a = std::make_unique<Client>(server->port());
  Client b(server->port());
  for (Client* c : {a.get(), &b}) {
    ASSERT_TRUE(c->Send("GET /held HTTP/1.1\r\n\r\n"));
    Client::Reply reply;
    ASSERT_TRUE(c->ReadReply(&reply));
    EXPECT_EQ(reply.status, 200);
  }
  {
    // A third connection from 127.0.0.1 is refused, and told why.
    Client over(server->port());
    Client::Reply reply;
    ASSERT_TRUE(over.ReadReply(&reply));
    EXPECT_EQ(reply.status, 503);
    EXPECT_EQ(reply.body, "too many connections from 127.0.0.1 (at most 2)\n");
    EXPECT_EQ(reply.headers["retry-after"], "1");
    EXPECT_TRUE(over.WaitClosed());
  }
  {
    // Another address is served meanwhile.
    Client other(server->port(), "127.0.0.2");
    ASSERT_TRUE(other.connected());
    ASSERT_TRUE(other.Send("GET /other HTTP/1.1\r\n\r\n"));
    Client::Reply reply;
    ASSERT_TRUE(other.ReadReply(&reply));
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(reply.body, "GET /other  ");
  }
  // Once one of the two goes, 127.0.0.1 may connect again.
  a.reset();
  Client::Reply reply;
  for (int attempt = 0; attempt < 50 && reply.status != 200; ++attempt) {
    std::this_thread::sleep_for(Ms(20));  // until the server has seen the close
    Client again(server->port());
    reply = Client::Reply();
    // A refused connection may be reset before the request is written.
    if (!again.Send("GET /again HTTP/1.1\r\n\r\n")) continue;
    if (!again.ReadReply(&reply)) continue;
  }
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "GET /again  ");
}

// The refusal formatted by error_response (the gateway's JSON) still invites a retry, once.
TEST(HttpServerRobustnessTest, RefusalThroughErrorResponseCarriesRetryAfter) {
  ServerOptions options;
  options.max_connections_per_ip = 1;
  options.error_response = [](int status, const std::string& message, const std::string&) {
    return Response{status, {{"Content-Type", "application/json"}}, absl::StrCat("\"", message, "\"")};
  };
  auto server = StartServer(EchoHandler, options);
  Client held(server->port());
  ASSERT_TRUE(held.Send("GET /held HTTP/1.1\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(held.ReadReply(&reply));
  Client over(server->port());
  reply = Client::Reply();
  ASSERT_TRUE(over.ReadReply(&reply));
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.headers["content-type"], "application/json");
  EXPECT_EQ(reply.headers["retry-after"], "1");

  // One that sets its own Retry-After keeps it, with no second one.
  options.error_response = [](int status, const std::string&, const std::string&) {
    return Response{status, {{"Retry-After", "7"}}, "busy"};
  };
  server = StartServer(EchoHandler, options);
  Client first(server->port());
  ASSERT_TRUE(first.Send("GET /held HTTP/1.1\r\n\r\n"));
  reply = Client::Reply();
  ASSERT_TRUE(first.ReadReply(&reply));
  Client second(server->port());
  std::string raw, line;  // the head as sent (the reply's header map would merge two)
  while (second.ReadLine(&line) && !line.empty()) absl::StrAppend(&raw, line, "\r\n");
  EXPECT_TRUE(absl::StrContains(raw, "Retry-After: 7\r\n")) << raw;
  EXPECT_FALSE(absl::StrContains(raw, "Retry-After: 1")) << raw;
}

TEST(HttpServerRobustnessTest, HalfClosedClientGetsTheResponse) {
  auto server = StartServer([](const Request& req, std::shared_ptr<ResponseWriter> writer) {
    if (req.path == "/slow") {
      std::thread([writer] {
        std::this_thread::sleep_for(Ms(300));
        writer->Send(Response{200, {}, "slow"});
      }).detach();
      return;
    }
    writer->Send(Response{200, {}, "ok"});
  });
  for (const char* request : {"GET /live HTTP/1.1\r\n\r\n", "GET /slow HTTP/1.1\r\n\r\n",
                              "GET /live HTTP/1.0\r\n\r\n",
                              "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n"}) {
    Client client(server->port());
    ASSERT_TRUE(client.Send(request));
    client.ShutdownWrite();
    Client::Reply reply;
    ASSERT_TRUE(client.ReadFinalReply(&reply)) << request;
    EXPECT_EQ(reply.status, 200) << request;
    if (absl::StrContains(request, "/b")) {  // pipelined requests before the FIN are all answered
      ASSERT_TRUE(client.ReadFinalReply(&reply)) << request;
      EXPECT_EQ(reply.status, 200) << request;
    }
    EXPECT_TRUE(client.WaitClosed()) << request;
  }
  // A half-closed client with an unfinished request is told so instead of being dropped.
  Client client(server->port());
  ASSERT_TRUE(client.Send("POST /e HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"));
  client.ShutdownWrite();
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 400);
}

TEST(HttpServerRobustnessTest, FullyClosedClientStillCancelsItsRequest) {
  std::promise<void> closed;
  std::promise<void> started;
  std::shared_ptr<ResponseWriter> held;
  auto server = StartServer([&](const Request&, std::shared_ptr<ResponseWriter> writer) {
    held = writer;
    writer->OnClose([&] { closed.set_value(); });
    started.set_value();
  });
  auto client = std::make_unique<Client>(server->port());
  ASSERT_TRUE(client->Send("POST /g HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"));
  ASSERT_EQ(started.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready);
  client.reset();  // close(): FIN, and a reset once the server writes anything
  EXPECT_EQ(closed.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready);
  server->Stop();
}

// A head may arrive in any number of reads (the parser once fed Beast the request line again
// after Beast had taken it, and answered 400).
TEST(HttpServerRobustnessTest, HeadSentInTwoWritesIsServed) {
  auto server = StartServer(EchoHandler);
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET /x HTTP/1.1\r\nHost: a\r\n"));
  std::this_thread::sleep_for(Ms(50));
  ASSERT_TRUE(client.Send("\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "GET /x  ");
}

// An empty line after a request (ignored, RFC 9112 2.2) is not the start of a head: it must not
// start the header deadline on what is an idle connection.
TEST(HttpServerRobustnessTest, StrayCrlfAfterARequestLeavesTheConnectionIdle) {
  ServerOptions options;
  options.header_timeout_ms = 200;
  auto server = StartServer(EchoHandler, options);
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET /a HTTP/1.1\r\n\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 200);
  EXPECT_FALSE(client.ReadableWithin(400)) << "an unsolicited 408 or a close";
  ASSERT_TRUE(client.Send("GET /b HTTP/1.1\r\n\r\n"));
  reply = Client::Reply();
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "GET /b  ");
}

constexpr size_t kBig = 4 << 20;

// /big: kBig bytes in one Send; /stream: kBig / 2 in four chunks; else echo.
void BigHandler(const Request& req, std::shared_ptr<ResponseWriter> writer) {
  if (req.path == "/big") {
    writer->Send(Response{200, {}, std::string(kBig, 'x')});
  } else if (req.path == "/stream") {
    writer->StartStream(200, {});
    for (int i = 0; i < 4; ++i) writer->WriteChunk(std::string(kBig / 8, 's'));
    writer->EndStream();
  } else {
    EchoHandler(req, std::move(writer));
  }
}

// Reads until `total` bytes are buffered, at most `piece` bytes at a time with `pause` after
// each read; false if the server closes first.
bool ReadSlowly(Client* client, size_t total, size_t piece, Ms pause) {
  while (client->buffered() < total) {
    if (client->FillUpTo(piece) == 0) return false;
    std::this_thread::sleep_for(pause);
  }
  return true;
}

// A finished response still being written is not an idle connection: a reader taking far longer
// than the idle timeout gets all of it while it makes progress (a stalled one is still closed).
TEST(HttpServerRobustnessTest, SlowReaderOfAFinishedResponseGetsAllOfIt) {
  ServerOptions options;
  options.idle_timeout_ms = 300;
  auto server = StartServer(BigHandler, options);
  for (const auto& [path, size] : {std::pair<const char*, size_t>{"/big", kBig}, {"/stream", kBig / 2}}) {
    Client client(server->port(), nullptr, 64 << 10);
    ASSERT_TRUE(client.Send(absl::StrCat("GET ", path, " HTTP/1.1\r\n\r\n")));
    // 64 KiB every 100 ms: several seconds, many idle timeouts.
    ASSERT_TRUE(ReadSlowly(&client, size, 64 << 10, Ms(100))) << path << ": cut off";
    Client::Reply reply;
    ASSERT_TRUE(client.ReadReply(&reply)) << path;
    EXPECT_EQ(reply.status, 200) << path;
    EXPECT_EQ(reply.body.size(), size) << path;
  }
}

// At max_connections a connection still writing a finished response is not evicted as idle
// (nor sent a 408 behind it): an idle keep-alive connection goes instead.
TEST(HttpServerRobustnessTest, AConnectionStillSendingIsNotEvicted) {
  ServerOptions options;
  options.max_connections = 2;
  auto server = StartServer(BigHandler, options);
  Client slow(server->port(), nullptr, 64 << 10);
  ASSERT_TRUE(slow.Send("GET /big HTTP/1.1\r\n\r\n"));
  ASSERT_GT(slow.FillUpTo(64 << 10), 0u);  // the response is done and being written
  std::this_thread::sleep_for(Ms(50));
  Client idle(server->port());
  ASSERT_TRUE(idle.Send("GET /idle HTTP/1.1\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(idle.ReadReply(&reply));
  std::this_thread::sleep_for(Ms(50));
  Client fresh(server->port());
  ASSERT_TRUE(fresh.Send("GET /fresh HTTP/1.1\r\n\r\n"));
  reply = Client::Reply();
  ASSERT_TRUE(fresh.ReadReply(&reply));
  EXPECT_EQ(reply.status, 200);
  EXPECT_TRUE(idle.WaitClosed());
  ASSERT_TRUE(ReadSlowly(&slow, kBig, 1 << 20, Ms(0))) << "the slow reader was evicted";
  reply = Client::Reply();
  ASSERT_TRUE(slow.ReadReply(&reply));
  EXPECT_EQ(reply.body.size(), kBig);
}

}  // namespace
}  // namespace blossom::http
