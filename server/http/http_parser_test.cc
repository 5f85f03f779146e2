#include "server/http/http_parser.h"

#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace blossom::http {
namespace {

using Result = RequestParser::Result;

// Feeds `input` one byte at a time, so every state must cope with partial data.
Result FeedBytewise(RequestParser* parser, const std::string& input, std::string* buffer) {
  Result r = Result::kNeedMore;
  for (char c : input) {
    buffer->push_back(c);
    do {
      r = parser->Parse(buffer);
    } while (r == Result::kHeadersComplete);
    if (r != Result::kNeedMore) return r;
  }
  return r;
}

TEST(HttpParserTest, ParsesRequestWithBodyBytewise) {
  RequestParser parser({});
  std::string buffer;
  Result r = FeedBytewise(&parser,
                          "POST /v1/x?a=1&b=2 HTTP/1.1\r\nHost: h\r\nX-Name:  v a l \r\n"
                          "Content-Length: 5\r\n\r\nhello",
                          &buffer);
  ASSERT_EQ(r, Result::kComplete);
  EXPECT_EQ(parser.request().method, "POST");
  EXPECT_EQ(parser.request().path, "/v1/x");
  EXPECT_EQ(parser.request().query, "a=1&b=2");
  ASSERT_NE(parser.request().Header("x-name"), nullptr);
  EXPECT_EQ(*parser.request().Header("x-name"), "v a l");
  EXPECT_EQ(parser.request().body, "hello");
  EXPECT_TRUE(parser.keep_alive());
}

TEST(HttpParserTest, ParsesChunkedBodyWithTrailers) {
  RequestParser parser({});
  std::string buffer;
  Result r = FeedBytewise(&parser,
                          "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "5;ext=1\r\nhello\r\n1\r\n!\r\n0\r\nX-T: 1\r\n\r\n",
                          &buffer);
  ASSERT_EQ(r, Result::kComplete);
  EXPECT_EQ(parser.request().body, "hello!");
  EXPECT_TRUE(buffer.empty());
}

TEST(HttpParserTest, LeavesPipelinedRequestInBuffer) {
  RequestParser parser({});
  std::string buffer = "GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.0\r\n\r\n";
  ASSERT_EQ(parser.Parse(&buffer), Result::kHeadersComplete);
  ASSERT_EQ(parser.Parse(&buffer), Result::kComplete);
  EXPECT_EQ(parser.request().path, "/a");
  parser.Reset();
  ASSERT_EQ(parser.Parse(&buffer), Result::kHeadersComplete);
  ASSERT_EQ(parser.Parse(&buffer), Result::kComplete);
  EXPECT_EQ(parser.request().path, "/b");
  EXPECT_FALSE(parser.keep_alive());  // HTTP/1.0 without keep-alive
}

struct BadCase {
  const char* input;
  int status;
};

TEST(HttpParserTest, RejectsMalformedRequests) {
  const BadCase cases[] = {
      {"GET /\r\n\r\n", 400},
      {"GET  / HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1 x\r\n\r\n", 400},
      {"G(T / HTTP/1.1\r\n\r\n", 400},
      {"GET / FTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nName : v\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: \r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      // Chunk data not followed by CRLF (refused once the next line ends).
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 413},
      {"POST / HTTP/1.1\r\nExpect: magic\r\n\r\n", 417},
      // Bare LF line ends are refused at once instead of waiting for a CRLF CRLF.
      {"GET / HTTP/1.1\n\n", 400},
      {"GET / HTTP/1.1\r\nHost: x\n\r\n", 400},
      {"GET / HTTP/1.1\r\nHost: x\r\n\n", 400},
      // HTTP/1.0 has no chunked framing (RFC 9112 6.1).
      {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
      {"GET http:///x HTTP/1.1\r\n\r\n", 400},
  };
  for (const BadCase& c : cases) {
    RequestParser parser({});
    std::string buffer = c.input;
    Result r;
    do {
      r = parser.Parse(&buffer);
    } while (r == Result::kHeadersComplete);
    ASSERT_EQ(r, Result::kError) << c.input;
    EXPECT_EQ(parser.error_status(), c.status) << c.input << ": " << parser.error_message();
  }
}

TEST(HttpParserTest, AbsoluteFormTargetsAreRoutedByPath) {
  const std::pair<const char*, const char*> cases[] = {
      {"http://example.com/live", "/live"},
      {"HTTP://example.com:8080/v1/models?x=1", "/v1/models?x=1"},
      {"https://example.com", "/"},
      {"http://example.com?q", "/?q"},
  };
  for (const auto& [target, want] : cases) {
    RequestParser parser({});
    std::string buffer = std::string("GET ") + target + " HTTP/1.1\r\nHost: example.com\r\n\r\n";
    Result r;
    do {
      r = parser.Parse(&buffer);
    } while (r == Result::kHeadersComplete);
    ASSERT_EQ(r, Result::kComplete) << target << ": " << parser.error_message();
    EXPECT_EQ(parser.request().target, want) << target;
    EXPECT_EQ(parser.request().path, std::string(want).substr(0, std::string(want).find('?')));
  }
}

TEST(HttpParserTest, LimitsAreCheckedBeforeTheBody) {
  ParserLimits limits;
  limits.max_header_bytes = 64;
  limits.max_body_bytes = 10;
  {
    RequestParser parser(limits);
    std::string buffer = "GET / HTTP/1.1\r\nX-Long: " + std::string(100, 'a');  // no blank line yet
    EXPECT_EQ(parser.Parse(&buffer), Result::kError);
    EXPECT_EQ(parser.error_status(), 431);
  }
  {
    RequestParser parser(limits);
    std::string buffer = "POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n";  // body not sent
    EXPECT_EQ(parser.Parse(&buffer), Result::kError);
    EXPECT_EQ(parser.error_status(), 413);
  }
  {
    RequestParser parser(limits);
    std::string buffer = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n";
    Result r;
    do {
      r = parser.Parse(&buffer);
    } while (r == Result::kHeadersComplete);
    EXPECT_EQ(r, Result::kError);
    EXPECT_EQ(parser.error_status(), 413);
  }
  {
    RequestParser parser(limits);
    std::string buffer = "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n";
    EXPECT_EQ(parser.Parse(&buffer), Result::kHeadersComplete);
    EXPECT_TRUE(parser.expects_continue());
    EXPECT_EQ(parser.Parse(&buffer), Result::kNeedMore);
  }
}

}  // namespace
}  // namespace blossom::http
