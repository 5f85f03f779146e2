// HTTPS on http::Server (ServerOptions::tls_cert_file/tls_key_file): a self-signed certificate
// made for the test with the openssl CLI, and a Beast client over Asio SSL that verifies it.
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/http/http_server.h"
#include "server/http/test_client.h"
#include "server/testing/run_binary.h"

namespace blossom::http {
namespace {

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using asio::ip::tcp;

// A certificate for 127.0.0.1/localhost and its key, made once per test binary.
struct TestCert {
  std::string cert, key;
};

const TestCert& Cert() {
  static const TestCert* cert = [] {
    const char* dir = std::getenv("TEST_TMPDIR");
    auto* c = new TestCert{absl::StrCat(dir ? dir : "/tmp", "/tls_test_cert.pem"),
                           absl::StrCat(dir ? dir : "/tmp", "/tls_test_key.pem")};
    const blossom::testing::RunResult openssl = blossom::testing::RunBinary(
        {"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout",
         c->key, "-out", c->cert});
    EXPECT_EQ(openssl.exit_code, 0) << "needs the openssl CLI: " << openssl.output;
    return c;
  }();
  return *cert;
}

void EchoHandler(const Request& req, std::shared_ptr<ResponseWriter> writer) {
  if (req.path == "/stream") {
    writer->StartStream(200, {{"Content-Type", "text/plain"}});
    for (int i = 0; i < 3; ++i) writer->WriteChunk(absl::StrCat("part", i, ";"));
    writer->EndStream();
    return;
  }
  writer->Send(Response{200, {{"Content-Type", "text/plain"}},
                        absl::StrCat(req.method, " ", req.path, " ", req.body)});
}

std::unique_ptr<Server> StartTlsServer() {
  ServerOptions options;
  options.tls_cert_file = Cert().cert;
  options.tls_key_file = Cert().key;
  auto server = Server::Start(options, EchoHandler);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

// An HTTPS client that trusts only the test certificate and checks the host name.
class TlsClient {
 public:
  explicit TlsClient(int port) : tls_(asio::ssl::context::tls_client), stream_(io_, tls_) {
    tls_.load_verify_file(Cert().cert);
    stream_.set_verify_mode(asio::ssl::verify_peer);
    stream_.set_verify_callback(asio::ssl::host_name_verification("localhost"));
    stream_.next_layer().connect(tcp::endpoint(asio::ip::address_v4::loopback(), port));
    stream_.handshake(asio::ssl::stream_base::client);
  }

  // Sends a request without reading the answer.
  void SendOnly(const std::string& target) {
    beast_http::request<beast_http::string_body> request(beast_http::verb::get, target, 11);
    request.set(beast_http::field::host, "localhost");
    beast_http::write(stream_, request);
  }
  // Closes the TCP connection without a TLS close_notify, as a client that goes away does.
  void Drop() { stream_.next_layer().close(); }

  beast_http::response<beast_http::string_body> Get(const std::string& target,
                                                    const std::string& body = "") {
    beast_http::request<beast_http::string_body> request(
        body.empty() ? beast_http::verb::get : beast_http::verb::post, target, 11);
    request.set(beast_http::field::host, "localhost");
    request.body() = body;
    request.prepare_payload();
    beast_http::write(stream_, request);
    beast_http::response<beast_http::string_body> response;
    beast_http::read(stream_, buffer_, response);
    return response;
  }

 private:
  asio::io_context io_;
  asio::ssl::context tls_;
  asio::ssl::stream<tcp::socket> stream_;
  boost::beast::flat_buffer buffer_;
};

class HttpServerTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartTlsServer();
    ASSERT_NE(server_, nullptr);
  }
  int port() const { return server_->port(); }

  std::unique_ptr<Server> server_;
};

TEST_F(HttpServerTlsTest, ServesKeepAliveRequestsOverTls) {
  TlsClient client(port());
  auto first = client.Get("/a");
  EXPECT_EQ(first.result_int(), 200);
  EXPECT_EQ(first.body(), "GET /a ");
  auto second = client.Get("/b", "hello");  // the same TLS connection
  EXPECT_EQ(second.result_int(), 200);
  EXPECT_EQ(second.body(), "POST /b hello");
}

TEST_F(HttpServerTlsTest, StreamsChunkedResponsesOverTls) {
  TlsClient client(port());
  auto response = client.Get("/stream");
  EXPECT_EQ(response.result_int(), 200);
  EXPECT_TRUE(response.chunked());
  EXPECT_EQ(response.body(), "part0;part1;part2;");
}

TEST(HttpServerTlsCancelTest, ClientThatGoesAwayCancelsItsRequest) {
  std::promise<void> started, closed;
  std::shared_ptr<ResponseWriter> held;
  ServerOptions options;
  options.tls_cert_file = Cert().cert;
  options.tls_key_file = Cert().key;
  auto server = Server::Start(options, [&](const Request&, std::shared_ptr<ResponseWriter> writer) {
    held = writer;  // never answered: only the disconnect ends it
    writer->OnClose([&] { closed.set_value(); });
    started.set_value();
  });
  ASSERT_TRUE(server.ok()) << server.status();
  TlsClient client((*server)->port());
  client.SendOnly("/held");
  ASSERT_EQ(started.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready);
  client.Drop();
  EXPECT_EQ(closed.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(held->closed());
  (*server)->Stop();
}

TEST_F(HttpServerTlsTest, PlainHttpOnATlsPortIsNotServed) {
  testing::Client client(port());
  ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\n\r\n"));
  testing::Client::Reply reply;
  EXPECT_FALSE(client.ReadReply(&reply));  // the handshake fails and the server closes
  EXPECT_TRUE(client.WaitClosed());
}

TEST_F(HttpServerTlsTest, ClientThatDoesNotTrustTheCertificateFailsTheHandshake) {
  asio::io_context io;
  asio::ssl::context tls(asio::ssl::context::tls_client);  // no CA: the test cert is untrusted
  asio::ssl::stream<tcp::socket> stream(io, tls);
  stream.set_verify_mode(asio::ssl::verify_peer);
  stream.next_layer().connect(tcp::endpoint(asio::ip::address_v4::loopback(), port()));
  boost::system::error_code ec;
  stream.handshake(asio::ssl::stream_base::client, ec);
  EXPECT_TRUE(ec);
}

TEST(HttpServerTlsOptionsTest, MissingOrUnpairedCertificateFailsToStart) {
  ServerOptions options;
  options.tls_cert_file = Cert().cert;  // no key
  auto unpaired = Server::Start(options, EchoHandler);
  EXPECT_FALSE(unpaired.ok());
  options.tls_key_file = "/nonexistent/key.pem";
  auto missing = Server::Start(options, EchoHandler);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/key.pem"), std::string::npos)
      << missing.status();
}

}  // namespace
}  // namespace blossom::http
