// Drives a LoadClient through an arrival schedule under a concurrency cap, vLLM-style: request i
// is released at schedule[i] seconds after the start; if `max_concurrency` requests are already
// in flight it waits (in arrival order) for one to finish, and is sent then. TTFT and E2E are
// measured from the send, so the wait for a slot is not counted against the server (the records
// keep both times).
//
// Thread-safety: RunLoad blocks the calling thread until every request has completed; the
// client's completion callbacks may run on any thread.
#ifndef BLOSSOM_BENCHMARKS_LOAD_RUNNER_H_
#define BLOSSOM_BENCHMARKS_LOAD_RUNNER_H_

#include <vector>

#include "benchmarks/load_client.h"

namespace blossom {

struct LoadRunResult {
  std::vector<RequestRecord> records;  // in request order
  double duration_s = 0;               // start -> last completion
};

// `schedule` has one send offset per request (seconds); `max_concurrency` <= 0 = unlimited.
LoadRunResult RunLoad(LoadClient& client, std::vector<LoadRequest> requests,
                      const std::vector<double>& schedule, int max_concurrency);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_LOAD_RUNNER_H_
