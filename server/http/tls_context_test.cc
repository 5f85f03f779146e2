// Certificate renewal without a restart (TlsContextSource) and the cipher floor, on the source
// alone and through http::Server. Certificates are made in-process with OpenSSL (EC P-256,
// self-signed, for localhost and 127.0.0.1: server/testing/self_signed_cert.h).
#include "server/http/tls_context.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/http/http_server.h"
#include "server/testing/self_signed_cert.h"

namespace blossom::http::internal {
namespace {

namespace asio = boost::asio;
namespace beast_http = boost::beast::http;
using asio::ip::tcp;

using ::blossom::testing::PemPair;
using ::blossom::testing::SelfSignedCert;
using ::blossom::testing::WriteTextFile;

std::string CommonName(X509* x509) {
  if (x509 == nullptr) return "(none)";
  char name[256] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(x509), NID_commonName, name, sizeof(name));
  return name;
}

std::string ServedName(const std::shared_ptr<asio::ssl::context>& context) {
  return CommonName(SSL_CTX_get0_certificate(context->native_handle()));
}

void WriteFile(const std::string& path, const std::string& text) {
  ASSERT_TRUE(WriteTextFile(path, text)) << path;
}

class TlsFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TEST_TMPDIR");
    const std::string base = absl::StrCat(dir ? dir : "/tmp", "/",
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    cert_ = base + "_cert.pem";
    key_ = base + "_key.pem";
  }
  void Install(const PemPair& pem) {
    WriteFile(cert_, pem.cert);
    WriteFile(key_, pem.key);
  }

  std::string cert_, key_;
};

TEST_F(TlsFiles, RenewedFilesAreServedAndUnchangedOnesAreNotRebuilt) {
  Install(SelfSignedCert("first"));
  auto source = TlsContextSource::Create(cert_, key_, std::chrono::seconds(0));
  ASSERT_TRUE(source.ok()) << source.status();
  std::shared_ptr<asio::ssl::context> first = (*source)->Current();
  EXPECT_EQ(ServedName(first), "first");
  EXPECT_EQ((*source)->Current(), first);  // nothing changed: the same context
  EXPECT_EQ((*source)->reloads(), 0);

  Install(SelfSignedCert("second-name"));
  std::shared_ptr<asio::ssl::context> second = (*source)->Current();
  EXPECT_EQ(ServedName(second), "second-name");
  EXPECT_EQ((*source)->reloads(), 1);
  EXPECT_EQ(ServedName(first), "first");  // a connection holding the old one keeps it
}

TEST_F(TlsFiles, FilesThatDoNotLoadKeepThePreviousCertificateUntilTheyDo) {
  const PemPair first = SelfSignedCert("first");
  Install(first);
  auto source = TlsContextSource::Create(cert_, key_, std::chrono::seconds(0));
  ASSERT_TRUE(source.ok()) << source.status();
  std::shared_ptr<asio::ssl::context> served = (*source)->Current();

  // Mid-rotation: the new certificate is in place, its key not yet.
  const PemPair second = SelfSignedCert("second-name");
  WriteFile(cert_, second.cert);
  EXPECT_EQ((*source)->Current(), served);
  WriteFile(cert_, "not a certificate");
  EXPECT_EQ((*source)->Current(), served);
  EXPECT_EQ((*source)->reloads(), 0);

  WriteFile(cert_, second.cert);
  WriteFile(key_, second.key);
  EXPECT_EQ(ServedName((*source)->Current()), "second-name");
  EXPECT_EQ((*source)->reloads(), 1);
}

TEST_F(TlsFiles, ChangesAreLookedAtOncePerInterval) {
  Install(SelfSignedCert("first"));
  auto source = TlsContextSource::Create(cert_, key_, std::chrono::hours(1));
  ASSERT_TRUE(source.ok()) << source.status();
  Install(SelfSignedCert("second-name"));
  EXPECT_EQ(ServedName((*source)->Current()), "first");
  EXPECT_EQ((*source)->reloads(), 0);
}

TEST_F(TlsFiles, AKeyThatDoesNotMatchFailsCreateNamingTheKeyFile) {
  WriteFile(cert_, SelfSignedCert("first").cert);
  WriteFile(key_, SelfSignedCert("other").key);
  auto source = TlsContextSource::Create(cert_, key_);
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.status().message().find(key_), std::string::npos) << source.status();
}

// A TLS client that trusts any certificate (the test checks which one it got) and offers only
// `ciphers` in TLS 1.2, or OpenSSL's defaults when empty.
struct Handshake {
  bool ok = false;
  std::string served_name;
};

Handshake Connect(int port, const std::string& tls12_ciphers = "") {
  asio::io_context io;
  asio::ssl::context tls(tls12_ciphers.empty() ? asio::ssl::context::tls_client
                                               : asio::ssl::context::tlsv12_client);
  if (!tls12_ciphers.empty()) SSL_CTX_set_cipher_list(tls.native_handle(), tls12_ciphers.c_str());
  asio::ssl::stream<tcp::socket> stream(io, tls);
  stream.set_verify_mode(asio::ssl::verify_none);
  stream.next_layer().connect(tcp::endpoint(asio::ip::address_v4::loopback(), port));
  boost::system::error_code ec;
  stream.handshake(asio::ssl::stream_base::client, ec);
  Handshake result;
  if (ec) return result;
  result.ok = true;
  X509* peer = SSL_get1_peer_certificate(stream.native_handle());
  result.served_name = CommonName(peer);
  X509_free(peer);
  return result;
}

void Hello(const Request&, std::shared_ptr<ResponseWriter> writer) {
  writer->Send(Response{200, {{"Content-Type", "text/plain"}}, "hello"});
}

absl::StatusOr<std::unique_ptr<Server>> StartServer(const std::string& cert,
                                                    const std::string& key) {
  ServerOptions options;
  options.tls_cert_file = cert;
  options.tls_key_file = key;
  return Server::Start(options, Hello);
}

TEST_F(TlsFiles, TheServerHandsNewConnectionsTheRenewedCertificate) {
  Install(SelfSignedCert("first"));
  auto server = StartServer(cert_, key_);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(Connect((*server)->port()).served_name, "first");

  Install(SelfSignedCert("second-name"));
  // The server looks at the files at most once a second.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(Connect((*server)->port()).served_name, "second-name");
  (*server)->Stop();
}

TEST_F(TlsFiles, Tls12WithoutForwardSecrecyOrAeadIsRefused) {
  Install(SelfSignedCert("first"));
  auto server = StartServer(cert_, key_);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_TRUE(Connect(port, "ECDHE-ECDSA-AES128-GCM-SHA256").ok);
  EXPECT_TRUE(Connect(port, "ECDHE-ECDSA-CHACHA20-POLY1305").ok);
  EXPECT_FALSE(Connect(port, "ECDHE-ECDSA-AES128-SHA").ok);     // CBC
  EXPECT_FALSE(Connect(port, "ECDHE-ECDSA-AES256-SHA384").ok);  // CBC
  (*server)->Stop();
}

}  // namespace
}  // namespace blossom::http::internal
