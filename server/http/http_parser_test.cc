#include "server/http/http_parser.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

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

// What parsing a byte stream yields: each request (or the error that ended it) as text.
std::vector<std::string> ParseStream(const std::vector<std::string>& pieces,
                                     ParserLimits limits = {}) {
  RequestParser parser(limits);
  std::vector<std::string> out;
  std::string buffer;
  for (const std::string& piece : pieces) {
    buffer += piece;
    for (;;) {
      const Result r = parser.Parse(&buffer);
      if (r == Result::kHeadersComplete) continue;
      if (r == Result::kNeedMore) break;
      if (r == Result::kError) {
        out.push_back(absl::StrCat("error ", parser.error_status(), " ", parser.error_message()));
        return out;
      }
      const Request& req = parser.request();
      std::string text = absl::StrCat(req.method, " ", req.target, " 1.", req.version_minor,
                                      " keep-alive=", parser.keep_alive(), "\n");
      for (const auto& [name, value] : req.headers) absl::StrAppend(&text, name, "=", value, "\n");
      absl::StrAppend(&text, "body=", req.body);
      out.push_back(std::move(text));
      parser.Reset();
    }
  }
  if (!buffer.empty()) out.push_back(absl::StrCat("left over: ", buffer));
  return out;
}

// Bytes arrive split anywhere: fed in two pieces at every split point, each stream parses as it
// does whole (Beast may take the request line and whole header lines and still ask for more).
TEST(HttpParserTest, EverySplitPointParsesLikeTheWhole) {
  const std::string streams[] = {
      "GET /x HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET /x?q=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\nX-Empty:\r\nConnection: close\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
      "Content-Length: 14\r\n\r\n{\"prompt\":\"x\"}",
      "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;ext=1\r\nhello\r\n1\r\n!\r\n0\r\nX-Trailer: t\r\n\r\n",
      "\r\nGET /a HTTP/1.1\r\nHost: a\r\n\r\nPOST /b HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi",
      "GET /nohost HTTP/1.1\r\n\r\n",
  };
  for (const std::string& stream : streams) {
    const std::vector<std::string> whole = ParseStream({stream});
    ASSERT_FALSE(whole.empty()) << stream;
    ASSERT_EQ(whole.back().rfind("error", 0), std::string::npos) << stream << whole.back();
    for (size_t split = 0; split <= stream.size(); ++split) {
      EXPECT_EQ(ParseStream({stream.substr(0, split), stream.substr(split)}), whole)
          << "split at " << split << " of " << stream;
    }
  }
}

// The two-read case of the review: the request line and a header, then the blank line.
TEST(HttpParserTest, HeadEndingInALaterReadIsNotReparsed) {
  RequestParser parser({});
  std::string buffer = "GET /x HTTP/1.1\r\nHost: a\r\n";
  EXPECT_EQ(parser.Parse(&buffer), Result::kNeedMore);
  buffer += "\r\n";
  ASSERT_EQ(parser.Parse(&buffer), Result::kHeadersComplete) << parser.error_message();
  ASSERT_EQ(parser.Parse(&buffer), Result::kComplete);
  EXPECT_EQ(parser.request().path, "/x");
  ASSERT_NE(parser.request().Header("host"), nullptr);
  EXPECT_EQ(*parser.request().Header("host"), "a");
}

// Empty lines before a request are skipped and are not a head (the server starts the header
// deadline on in_head()); the first other byte is.
TEST(HttpParserTest, EmptyLinesBeforeARequestAreNotAHead) {
  RequestParser parser({});
  std::string buffer = "\r\n\r\n\r";
  EXPECT_EQ(parser.Parse(&buffer), Result::kNeedMore);
  EXPECT_FALSE(parser.in_head());
  buffer += "\nG";
  EXPECT_EQ(parser.Parse(&buffer), Result::kNeedMore);
  EXPECT_TRUE(parser.in_head());
  EXPECT_EQ(buffer, "G");
  buffer += "ET / HTTP/1.1\r\n\r\n";
  EXPECT_EQ(parser.Parse(&buffer), Result::kHeadersComplete);
  EXPECT_FALSE(parser.in_head());
}

// Empty lines are ignored before a request, but not without end: a client sending nothing else
// would keep its connection from ever being idle.
TEST(HttpParserTest, EndlessEmptyLinesAreRefused) {
  RequestParser parser({});
  std::string buffer;
  for (int i = 0; i < 16; ++i) {
    buffer += "\r\n";
    EXPECT_EQ(parser.Parse(&buffer), Result::kNeedMore) << i;
  }
  buffer += "\r\n";
  EXPECT_EQ(parser.Parse(&buffer), Result::kError);
  EXPECT_EQ(parser.error_status(), 400);
  // Sixteen, then a request: served.
  RequestParser served({});
  std::string pipelined = std::string(16 * 2, '\0');
  for (size_t i = 0; i < pipelined.size(); i += 2) pipelined.replace(i, 2, "\r\n");
  pipelined += "GET / HTTP/1.1\r\n\r\n";
  EXPECT_EQ(served.Parse(&pipelined), Result::kHeadersComplete);
}

// The limit is on the whole head, not on the request line and the fields apart (as Beast checks
// it), however the head arrives.
TEST(HttpParserTest, HeadLimitCountsRequestLineAndFieldsTogether) {
  ParserLimits limits;
  limits.max_header_bytes = 100;
  const std::string line = "GET /" + std::string(74, 'a') + " HTTP/1.1\r\n";            // 90 bytes
  const std::string fields = "X-Pad: " + std::string(81, 'b') + "\r\n";                 // 90 bytes
  ASSERT_EQ(line.size(), 90u);
  ASSERT_EQ(fields.size(), 90u);
  const std::string head = line + fields + "\r\n";
  for (size_t split : {size_t{0}, line.size(), line.size() + 10, head.size() - 1}) {
    const std::vector<std::string> result =
        ParseStream({head.substr(0, split), head.substr(split)}, limits);
    ASSERT_EQ(result.size(), 1u) << split;
    EXPECT_EQ(result[0].rfind("error 431", 0), 0u) << split << ": " << result[0];
  }
  // A head of exactly the limit is accepted.
  const std::string exact = "GET / HTTP/1.1\r\nX: " + std::string(100 - 23, 'c') + "\r\n\r\n";
  ASSERT_EQ(exact.size(), 100u);
  EXPECT_EQ(ParseStream({exact}, limits).at(0).rfind("GET", 0), 0u);
}

TEST(HttpParserTest, TrailersAndChunkExtensionsAreBounded) {
  ParserLimits limits;  // 16 KiB of head
  const std::string head = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  std::string trailers;
  for (int i = 0; trailers.size() < (20 << 10); ++i) {
    absl::StrAppend(&trailers, "X-T", i, ": ", std::string(100, 't'), "\r\n");
  }
  const std::string body = "5\r\nhello\r\n0\r\n" + trailers + "\r\n";
  // Whole, in 1 KiB pieces, and without the final blank line (the sender never ends them).
  std::vector<std::string> pieces = {head};
  for (size_t i = 0; i < body.size(); i += 1024) pieces.push_back(body.substr(i, 1024));
  for (const auto& input : {std::vector<std::string>{head + body}, pieces,
                            std::vector<std::string>{head + body.substr(0, body.size() - 2)}}) {
    const std::vector<std::string> result = ParseStream(input, limits);
    ASSERT_EQ(result.size(), 1u);
    EXPECT_EQ(result[0], "error 431 request chunk header or trailers too large");
  }
  // One chunk-size line with 20 KiB of extensions; and many small ones adding up.
  EXPECT_EQ(ParseStream({head + "5;x=" + std::string(20 << 10, 'e')}, limits).at(0),
            "error 431 request chunk header or trailers too large");
  std::string many = head;
  for (int i = 0; i < 200; ++i) absl::StrAppend(&many, "1;ext=", std::string(100, 'e'), "\r\nx\r\n");
  EXPECT_EQ(ParseStream({many + "0\r\n\r\n"}, limits).at(0),
            "error 431 request chunk extensions too large");
  // Within the limits they are accepted.
  EXPECT_EQ(ParseStream({head + "5;a=b\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"}, limits).at(0).rfind("POST", 0), 0u);
}

}  // namespace
}  // namespace blossom::http
