#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "server/http/test_client.h"

namespace blossom::http {
namespace {

using ::blossom::http::testing::Client;

// Echoes method, path, query and body.
void EchoHandler(const Request& req, std::shared_ptr<ResponseWriter> writer) {
  writer->Send(Response{200,
                        {{"Content-Type", "text/plain"}},
                        absl::StrCat(req.method, " ", req.path, " ", req.query, " ", req.body)});
}

std::unique_ptr<Server> StartServer(Handler handler, ServerOptions options = {}) {
  auto server = Server::Start(options, std::move(handler));
  EXPECT_TRUE(server.ok()) << server.status();
  return std::move(*server);
}

TEST(HttpServerTest, KeepAliveServesSequentialRequestsOnOneConnection) {
  auto server = StartServer(EchoHandler);
  Client client(server->port());
  ASSERT_TRUE(client.connected());
  for (int i = 0; i < 3; ++i) {
    std::string body = absl::StrCat("body", i);
    ASSERT_TRUE(client.Send(absl::StrCat("POST /echo?i=", i, " HTTP/1.1\r\nHost: x\r\nContent-Length: ",
                                         body.size(), "\r\n\r\n", body)));
    Client::Reply reply;
    ASSERT_TRUE(client.ReadReply(&reply));
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(reply.body, absl::StrCat("POST /echo i=", i, " ", body));
    EXPECT_EQ(reply.headers.count("connection"), 0u);
  }
}

TEST(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  auto server = StartServer([](const Request& req, std::shared_ptr<ResponseWriter> writer) {
    // The first request answers last from another thread: order must still hold.
    if (req.path == "/slow") {
      std::thread([writer] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        writer->Send(Response{200, {}, "slow"});
      }).detach();
      return;
    }
    writer->Send(Response{200, {}, req.path + req.body});
  });
  Client client(server->port());
  ASSERT_TRUE(client.Send(
      "GET /slow HTTP/1.1\r\n\r\n"
      "POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz"
      "POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
      "GET /c HTTP/1.1\r\n\r\n"));
  const char* expected[] = {"slow", "/axyz", "/bhi", "/c"};
  for (const char* want : expected) {
    Client::Reply reply;
    ASSERT_TRUE(client.ReadReply(&reply));
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(reply.body, want);
  }
}

TEST(HttpServerTest, StreamsChunksWrittenFromAnotherThread) {
  auto server = StartServer([](const Request&, std::shared_ptr<ResponseWriter> writer) {
    ASSERT_TRUE(writer->StartStream(200, {{"Content-Type", "text/event-stream"}}));
    std::thread([writer] {
      for (int i = 0; i < 5; ++i) EXPECT_TRUE(writer->WriteChunk(absl::StrCat("data: ", i, "\n\n")));
      EXPECT_TRUE(writer->EndStream());
      EXPECT_FALSE(writer->WriteChunk("late"));
    }).detach();
  });
  Client client(server->port());
  for (int round = 0; round < 2; ++round) {  // the connection is reusable after a stream
    ASSERT_TRUE(client.Send("GET /stream HTTP/1.1\r\n\r\n"));
    Client::Reply reply;
    ASSERT_TRUE(client.ReadReply(&reply));
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(reply.headers["content-type"], "text/event-stream");
    EXPECT_EQ(reply.headers["transfer-encoding"], "chunked");
    ASSERT_EQ(reply.chunks.size(), 5u);
    EXPECT_EQ(reply.chunks[4], "data: 4\n\n");
  }
}

TEST(HttpServerTest, OnCloseFiresOnceWhenClientDisconnectsMidStream) {
  std::promise<std::shared_ptr<ResponseWriter>> started;
  std::promise<void> closed;
  std::atomic<int> close_calls{0};
  auto server = StartServer([&](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->OnClose([&] {
      if (close_calls.fetch_add(1) == 0) closed.set_value();
    });
    writer->StartStream(200, {});
    writer->WriteChunk("first");
    started.set_value(writer);
  });
  auto client = std::make_unique<Client>(server->port());
  ASSERT_TRUE(client->Send("GET / HTTP/1.1\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(client->ReadHead(&reply));
  std::string chunk;
  ASSERT_TRUE(client->ReadChunk(&chunk));
  EXPECT_EQ(chunk, "first");
  auto writer = started.get_future().get();
  client.reset();  // disconnect mid-stream
  ASSERT_EQ(closed.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(writer->closed());
  EXPECT_FALSE(writer->WriteChunk("more"));
  EXPECT_FALSE(writer->EndStream());
  // A callback registered after the close runs at once; the first one never runs again.
  bool late = false;
  writer->OnClose([&] { late = true; });
  EXPECT_FALSE(late);  // at most once per exchange: already fired
  EXPECT_EQ(close_calls.load(), 1);
}

TEST(HttpServerTest, OnCloseRegisteredAfterDisconnectRunsAtOnce) {
  std::promise<std::shared_ptr<ResponseWriter>> got;
  auto server = StartServer(
      [&](const Request&, std::shared_ptr<ResponseWriter> writer) { got.set_value(writer); });
  auto client = std::make_unique<Client>(server->port());
  ASSERT_TRUE(client->Send("GET / HTTP/1.1\r\n\r\n"));
  auto writer = got.get_future().get();
  client.reset();
  for (int i = 0; i < 1000 && !writer->closed(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling an observable state
  }
  ASSERT_TRUE(writer->closed());
  int calls = 0;
  writer->OnClose([&] { ++calls; });
  EXPECT_EQ(calls, 1);
  writer->OnClose([&] { ++calls; });
  EXPECT_EQ(calls, 1);
}

TEST(HttpServerTest, OversizedBodyGets413BeforeItIsSent) {
  std::atomic<int> calls{0};
  ServerOptions options;
  options.max_body_bytes = 1000;
  auto server = StartServer([&](const Request& r, std::shared_ptr<ResponseWriter> w) {
    ++calls;
    EchoHandler(r, w);
  }, options);
  Client client(server->port());
  ASSERT_TRUE(client.Send("POST /x HTTP/1.1\r\nContent-Length: 5000\r\n\r\n"));  // headers only
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 413);
  EXPECT_EQ(reply.headers["connection"], "close");
  EXPECT_TRUE(client.WaitClosed());
  EXPECT_EQ(calls.load(), 0);
}

TEST(HttpServerTest, ErrorResponsesCanBeFormatted) {
  ServerOptions options;
  options.max_body_bytes = 10;
  options.error_response = [](int status, const std::string& message, const std::string& target) {
    return Response{status, {{"Content-Type", "application/json"}},
                    absl::StrCat("{\"status\":", status, ",\"message\":\"", message, "\",\"target\":\"",
                                 target, "\"}")};
  };
  auto server = StartServer(EchoHandler, options);
  Client client(server->port());
  ASSERT_TRUE(client.Send("POST /v1/x HTTP/1.1\r\nContent-Length: 11\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 413);
  EXPECT_EQ(reply.headers["content-type"], "application/json");
  EXPECT_EQ(reply.headers["connection"], "close");
  EXPECT_EQ(reply.body, "{\"status\":413,\"message\":\"request body too large\",\"target\":\"/v1/x\"}");
}

TEST(HttpServerTest, OversizedChunkedBodyGets413) {
  ServerOptions options;
  options.max_body_bytes = 100;
  auto server = StartServer(EchoHandler, options);
  Client client(server->port());
  ASSERT_TRUE(client.Send("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n50\r\n" +
                          std::string(80, 'a') + "\r\n50\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 413);
}

TEST(HttpServerTest, OversizedHeadGets431) {
  ServerOptions options;
  options.max_header_bytes = 1024;
  auto server = StartServer(EchoHandler, options);
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\nX-Big: " + std::string(4000, 'b') + "\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 431);
  EXPECT_TRUE(client.WaitClosed());
}

TEST(HttpServerTest, MalformedRequestsGet400AndClose) {
  auto server = StartServer(EchoHandler);
  const char* bad[] = {
      "GARBAGE\r\n\r\n",
      "GET / HTTP/1.1\r\nBad Header: x\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc",
      "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
  };
  for (const char* request : bad) {
    Client client(server->port());
    ASSERT_TRUE(client.Send(request));
    Client::Reply reply;
    ASSERT_TRUE(client.ReadReply(&reply)) << request;
    EXPECT_EQ(reply.status, 400) << request;
    EXPECT_TRUE(client.WaitClosed()) << request;
  }
}

TEST(HttpServerTest, ExpectContinueOnlyWithinLimits) {
  ServerOptions options;
  options.max_body_bytes = 100;
  auto server = StartServer(EchoHandler, options);
  {
    Client client(server->port());
    ASSERT_TRUE(client.Send("POST /e HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
    Client::Reply interim;
    ASSERT_TRUE(client.ReadHead(&interim));
    EXPECT_EQ(interim.status, 100);
    ASSERT_TRUE(client.Send("hello"));
    Client::Reply reply;
    ASSERT_TRUE(client.ReadReply(&reply));
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(reply.body, "POST /e  hello");
  }
  {
    Client client(server->port());
    ASSERT_TRUE(client.Send("POST /e HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 500\r\n\r\n"));
    Client::Reply reply;
    ASSERT_TRUE(client.ReadReply(&reply));
    EXPECT_EQ(reply.status, 413);  // no 100 Continue first
  }
}

TEST(HttpServerTest, ConnectionCloseAndHttp10CloseAfterResponse) {
  auto server = StartServer(EchoHandler);
  for (const char* request : {"GET /a HTTP/1.1\r\nConnection: close\r\n\r\n", "GET /a HTTP/1.0\r\n\r\n"}) {
    Client client(server->port());
    ASSERT_TRUE(client.Send(request));
    Client::Reply reply;
    ASSERT_TRUE(client.ReadReply(&reply));
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(reply.body, "GET /a  ");
    EXPECT_EQ(reply.headers["connection"], "close");
    EXPECT_TRUE(client.WaitClosed());
  }
  // HTTP/1.0 with keep-alive stays open.
  Client client(server->port());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(client.Send("GET /k HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    Client::Reply reply;
    ASSERT_TRUE(client.ReadReply(&reply));
    EXPECT_EQ(reply.body, "GET /k  ");
  }
}

TEST(HttpServerTest, Http10StreamEndsByClosing) {
  auto server = StartServer([](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->StartStream(200, {});
    writer->WriteChunk("ab");
    writer->WriteChunk("cd");
    writer->EndStream();
  });
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.body, "abcd");
}

TEST(HttpServerTest, HandlerThatNeverAnswersGets500) {
  auto server = StartServer([](const Request&, std::shared_ptr<ResponseWriter>) {});
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 500);
}

TEST(HttpServerTest, ServesAThousandConcurrentConnections) {
  ServerOptions options;
  options.handler_threads = 4;
  options.max_connections_per_ip = 0;  // every client here comes from 127.0.0.1
  auto server = StartServer(EchoHandler, options);
  constexpr int kClients = 1000;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<Client>(server->port()));
    ASSERT_TRUE(clients.back()->connected()) << i;
  }
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(clients[i]->Send(absl::StrCat("GET /c", i, " HTTP/1.1\r\n\r\n")));
  }
  for (int i = 0; i < kClients; ++i) {
    Client::Reply reply;
    ASSERT_TRUE(clients[i]->ReadReply(&reply)) << i;
    EXPECT_EQ(reply.body, absl::StrCat("GET /c", i, "  "));
  }
}

// Connection limits, deadlines and half-close: http_server_robustness_test.cc.

TEST(HttpServerTest, IdleConnectionsAreClosed) {
  ServerOptions options;
  options.idle_timeout_ms = 100;
  auto server = StartServer(EchoHandler, options);
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_TRUE(client.WaitClosed());
}

TEST(HttpServerTest, WriteChunkBlocksUnderBackPressureUntilThePeerGoes) {
  constexpr size_t kTotal = 256 << 20;  // far more than socket buffers plus the 4 MiB limit
  std::atomic<size_t> written{0};
  std::promise<bool> writer_result;
  auto server = StartServer([&](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->StartStream(200, {});
    std::thread([&, writer] {
      const std::string chunk(64 << 10, 'x');
      bool ok = true;
      while (ok && written.load() < kTotal) {
        ok = writer->WriteChunk(chunk);
        if (ok) written += chunk.size();
      }
      writer_result.set_value(ok);
    }).detach();
  });
  auto client = std::make_unique<Client>(server->port());
  ASSERT_TRUE(client->Send("GET / HTTP/1.1\r\n\r\n"));  // and never read
  // Wait until the writer stops making progress (it is blocked), polling observable state.
  size_t last = 0;
  for (int stable = 0, i = 0; stable < 5 && i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    size_t now = written.load();
    stable = now == last ? stable + 1 : 0;
    last = now;
  }
  EXPECT_LT(written.load(), kTotal / 4);
  client.reset();  // the blocked writer must wake up and fail
  auto result = writer_result.get_future();
  ASSERT_EQ(result.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_FALSE(result.get());
}

// Streams `total` bytes with QueueChunk, producing each next chunk only from OnWritable, the
// way a caller that must never block (the gateway's gRPC reactor) does. Produce() runs on the
// handler thread first, then on whichever thread runs the OnWritable callback.
class NonBlockingProducer : public std::enable_shared_from_this<NonBlockingProducer> {
 public:
  NonBlockingProducer(std::shared_ptr<ResponseWriter> writer, size_t total)
      : writer_(std::move(writer)), total_(total) {}

  void Produce() {
    if (!writer_->QueueChunk(chunk_)) {
      result_.set_value(false);
      return;
    }
    queued_ += chunk_.size();
    if (queued_.load() >= total_) {
      result_.set_value(writer_->EndStream());
      return;
    }
    writer_->OnWritable([self = shared_from_this()] { self->Produce(); });
  }
  size_t queued() const { return queued_.load(); }
  std::future<bool> result() { return result_.get_future(); }

 private:
  const std::shared_ptr<ResponseWriter> writer_;
  const size_t total_;
  const std::string chunk_ = std::string(64 << 10, 'x');
  std::atomic<size_t> queued_{0};
  std::promise<bool> result_;
};

// Waits until `progress` stops growing (a producer stalled by back-pressure).
size_t WaitForStall(const std::function<size_t()>& progress) {
  size_t last = progress();
  for (int stable = 0, i = 0; stable < 5 && i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    size_t now = progress();
    stable = now == last ? stable + 1 : 0;
    last = now;
  }
  return last;
}

TEST(HttpServerTest, QueueChunkWaitsForOnWritableThenDeliversEverything) {
  constexpr size_t kTotal = 64 << 20;  // far more than socket buffers plus the 4 MiB limit
  std::promise<std::shared_ptr<NonBlockingProducer>> started;
  auto server = StartServer([&](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->StartStream(200, {});
    auto producer = std::make_shared<NonBlockingProducer>(writer, kTotal);
    started.set_value(producer);
    producer->Produce();  // returns at once: the chain goes on from OnWritable
  });
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\n\r\n"));
  auto producer = started.get_future().get();
  auto result = producer->result();
  // Not reading: the producer stalls with a callback pending instead of queueing everything.
  const size_t stalled_at = WaitForStall([&] { return producer->queued(); });
  EXPECT_LT(stalled_at, kTotal / 2);
  EXPECT_NE(result.wait_for(std::chrono::milliseconds(0)), std::future_status::ready);
  // Reading resumes it, through OnWritable on the I/O thread, to the end.
  Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body.size(), kTotal);
  ASSERT_EQ(result.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_TRUE(result.get());
}

TEST(HttpServerTest, OnWritableRunsWhenAStalledPeerGoesAway) {
  std::promise<std::shared_ptr<NonBlockingProducer>> started;
  std::shared_ptr<ResponseWriter> kept;
  auto server = StartServer([&](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->StartStream(200, {});
    kept = writer;
    auto producer = std::make_shared<NonBlockingProducer>(writer, size_t{1} << 40);
    started.set_value(producer);
    producer->Produce();
  });
  auto client = std::make_unique<Client>(server->port());
  ASSERT_TRUE(client->Send("GET / HTTP/1.1\r\n\r\n"));  // and never read
  auto producer = started.get_future().get();
  auto result = producer->result();
  WaitForStall([&] { return producer->queued(); });
  client.reset();  // the pending callback runs on close and sees the writer closed
  ASSERT_EQ(result.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_FALSE(result.get());
  EXPECT_TRUE(kept->closed());
  // Once closed, a new callback runs at once on the caller's thread.
  bool ran = false;
  kept->OnWritable([&] { ran = true; });
  EXPECT_TRUE(ran);
}

TEST(HttpServerTest, StopClosesOpenStreams) {
  std::promise<std::shared_ptr<ResponseWriter>> started;
  std::atomic<int> close_calls{0};
  auto server = StartServer([&](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->OnClose([&] { ++close_calls; });
    writer->StartStream(200, {});
    started.set_value(writer);
  });
  Client client(server->port());
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\n\r\n"));
  Client::Reply reply;
  ASSERT_TRUE(client.ReadHead(&reply));
  auto writer = started.get_future().get();
  server->Stop();
  server->Stop();  // idempotent
  EXPECT_EQ(close_calls.load(), 1);
  EXPECT_TRUE(writer->closed());
  EXPECT_FALSE(writer->WriteChunk("x"));
  EXPECT_TRUE(client.WaitClosed());
  server.reset();
  EXPECT_FALSE(writer->EndStream());  // still safe after the server is gone
}

}  // namespace
}  // namespace blossom::http
