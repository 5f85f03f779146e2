// libFuzzer entry point (tools/fuzz/fuzz.bzl): bytes from a client, fed to the HTTP request
// parser (our adapter over Boost.Beast's request_parser) in pieces (the first byte sets the
// piece size), as a connection feeds it. It must make
// progress or stop with an error status, and every request it completes must respect the limits.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/http/http_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 64;
  blossom::http::ParserLimits limits;
  limits.max_header_bytes = 512;
  limits.max_body_bytes = 1024;
  blossom::http::RequestParser parser(limits);
  std::string buffer;
  for (size_t pos = 1; pos < size;) {
    const size_t n = std::min(piece, size - pos);
    buffer.append(reinterpret_cast<const char*>(data) + pos, n);
    pos += n;
    for (int rounds = 0;; ++rounds) {
      if (rounds > 10000) std::abort();  // no progress: a livelock
      const auto result = parser.Parse(&buffer);
      if (result == blossom::http::RequestParser::Result::kError) {
        if (parser.error_status() < 400 || parser.error_status() > 599) std::abort();
        return 0;
      }
      if (result == blossom::http::RequestParser::Result::kComplete) {
        if (parser.request().body.size() > limits.max_body_bytes) std::abort();
        parser.Reset();
        continue;
      }
      if (result == blossom::http::RequestParser::Result::kNeedMore) break;
    }
  }
  return 0;
}
