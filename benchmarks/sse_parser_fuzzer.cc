// libFuzzer entry point (tools/fuzz/fuzz.bzl): a server's response body for the benchmark's HTTP
// client, fed in pieces (the first byte sets the piece size) to the chunked-transfer decoder and
// the SSE framer, as a stream arrives. Neither may crash or grow without bound on any input.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "benchmarks/http_sse_client.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 32;
  blossom::ChunkedDecoder chunked;
  blossom::SseParser sse, sse_of_decoded;
  size_t delivered = 0;
  for (size_t pos = 1; pos < size; pos += piece) {
    const std::string bytes(reinterpret_cast<const char*>(data) + pos, std::min(piece, size - pos));
    for (const std::string& event : sse.Feed(bytes)) delivered += event.size();
    std::string decoded;
    if (!chunked.done() && chunked.Feed(bytes, &decoded)) {
      for (const std::string& event : sse_of_decoded.Feed(decoded)) delivered += event.size();
    }
  }
  if (delivered > 2 * size) std::abort();  // events hold only bytes that were received
  return 0;
}
