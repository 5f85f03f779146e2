// The `blossom` CLI's server mode: generate, stream, tokenize, health and info against a running
// blossom-server over gRPC (blocking stubs: a CLI runs one call at a time).
//
// Output: completions to `out` (streamed as deltas arrive for `stream`), statistics and errors
// to `err`. The return value is the process exit code: 0 on success, 1 when the server refused
// or failed the call (the message names the gRPC status), 2 for usage errors.
#ifndef BLOSSOM_CLIENTS_REMOTE_COMMANDS_H_
#define BLOSSOM_CLIENTS_REMOTE_COMMANDS_H_

#include <ostream>
#include <string>

#include "proto/blossom/v1/blossom.pb.h"

namespace blossom {

struct RemoteOptions {
  bool show_token_ids = false;  // beams: their token ids too (PrintBeams)
  std::string server;         // host:port
  std::string api_key;        // sent as "authorization: Bearer <key>" when non-empty
  double timeout_seconds = 0;  // per-call deadline; 0 = none
  bool tls = false;
  std::string tls_ca_file;    // PEM roots for TLS (empty = system roots)
  bool quiet = false;         // no statistics on `err`
};

// command: "generate", "stream", "tokenize", "health" or "info". `request` is used by
// generate/stream; tokenize uses request.text().
int RunRemoteCommand(const std::string& command, const RemoteOptions& options,
                     const v1::GenerateRequest& request, std::ostream& out, std::ostream& err);

// `generate --num_beams N`: the BeamSearch RPC; its beams printed by PrintBeams.
int RunRemoteBeamSearch(const RemoteOptions& options, const v1::BeamSearchRequest& request,
                        std::ostream& out, std::ostream& err);

// Beams best first: one beam as its text alone (as generate prints a completion); several (or
// any number with `token_ids`) each after a "# beam i: score=... cumulative_logprob=...
// finish_reason=..." line, which with `token_ids` ends with " token_ids=1,2,3". `prefix` goes
// before each text (the local CLI prints the prompt first).
void PrintBeams(const v1::BeamSearchResponse& response, const std::string& prefix,
                bool token_ids, std::ostream& out);

}  // namespace blossom

#endif  // BLOSSOM_CLIENTS_REMOTE_COMMANDS_H_
