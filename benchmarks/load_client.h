// The interface between the serving benchmark's driver (load_runner) and a protocol client
// (grpc_load_client, http_sse_client): start one streaming generation, report one RequestRecord.
//
// Implementations must be thread-safe: Start is called from the driver thread while earlier
// requests complete on the client's own threads.
#ifndef BLOSSOM_BENCHMARKS_LOAD_CLIENT_H_
#define BLOSSOM_BENCHMARKS_LOAD_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "benchmarks/serving_stats.h"

namespace blossom {

using BenchClock = std::chrono::steady_clock;

inline double SecondsSince(BenchClock::time_point epoch) {
  return std::chrono::duration<double>(BenchClock::now() - epoch).count();
}

struct LoadRequest {
  int index = 0;
  // Exactly one is used: token ids (gRPC `token_ids`) when non-empty, else text.
  std::string text;
  std::vector<int32_t> token_ids;
  int32_t prompt_tokens = 0;  // as built; the server's count replaces it when reported
  int32_t max_new_tokens = 1;
  double scheduled_s = 0;
};

// A tokenization with each token's [start, end) byte span in the text (spans empty when the
// server could not give exact ones).
struct Tokenized {
  std::vector<int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> spans;
};

class LoadClient {
 public:
  using Done = std::function<void(RequestRecord)>;
  virtual ~LoadClient() = default;
  // Sends `request` now (record.send_s is taken here) and calls `done` exactly once, from any
  // thread, when the stream ends or fails. Times are seconds since `epoch`. Must not block for
  // the duration of the request.
  virtual void Start(const LoadRequest& request, BenchClock::time_point epoch, Done done) = 0;
  // Tokenizes through the server (no special tokens), for building prompts of exact lengths.
  virtual absl::StatusOr<Tokenized> Tokenize(const std::string& text) = 0;
  // Whether Start can send token ids (gRPC) or only text (HTTP).
  virtual bool SupportsTokenIds() const = 0;
};

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_LOAD_CLIENT_H_
