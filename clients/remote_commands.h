// The `blossom` CLI's server mode: generate, stream, tokenize, health and info against a running
// blossom-server over gRPC (blocking stubs: a CLI runs one call at a time); and the command-line
// checks both modes share (ResolveCommandLine).
//
// Output: completions to `out` (streamed as deltas arrive for `stream`), statistics and errors
// to `err`. The return value is the process exit code: 0 on success, 1 when the server refused
// or failed the call (the message names the gRPC status), 2 for usage errors.
#ifndef BLOSSOM_CLIENTS_REMOTE_COMMANDS_H_
#define BLOSSOM_CLIENTS_REMOTE_COMMANDS_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/blossom/v1/blossom.pb.h"

namespace blossom {

// Flags that only beam search reads (the flag names, without dashes): without --num_beams they
// would be dropped, so ResolveCommandLine refuses them.
inline constexpr const char* kBeamOnlyFlags[] = {"num_return_sequences", "length_penalty",
                                                 "early_stopping", "show_token_ids"};

// What ResolveCommandLine checks, taken from the parsed command line.
struct CommandLineArguments {
  // The arguments that are not flags, after the program name: the command, then its TEXT if any.
  std::vector<std::string> positional;
  std::string prompt;  // --prompt
  int32_t num_beams = 0;
  // The kBeamOnlyFlags given a value other than their default.
  std::vector<std::string> beam_flags_set;
};

struct ResolvedCommand {
  std::string command;  // generate, stream, tokenize, health or info
  std::string text;     // the prompt (generate, stream) or the text (tokenize); else empty
};

// The command and its text, as the Python CLI takes them: `blossom generate|stream|tokenize
// TEXT` or `--prompt TEXT` (either, not both; one TEXT: several words are quoted as one). A
// usage error (an unknown command, a missing, repeated or extra argument, a beam-only flag
// without --num_beams N > 0, --num_beams with another command than generate) is printed to `err`
// as one line naming it, and returns 2; else 0.
int ResolveCommandLine(const CommandLineArguments& args, ResolvedCommand* resolved,
                       std::ostream& err);

struct RemoteOptions {
  bool show_token_ids = false;  // beams: their token ids too (PrintBeams)
  std::string server;         // host:port
  std::string api_key;        // sent as "authorization: Bearer <key>" when non-empty
  double timeout_seconds = 0;  // per-call deadline; 0 = none
  bool tls = false;
  std::string tls_ca_file;    // PEM roots for TLS (empty = system roots)
  // --tls_cert/--tls_key: a client certificate chain and its key (PEM) for a server that
  // requires one (blossom-server --tls_client_ca). Both or neither, with tls.
  std::string tls_cert_file;
  std::string tls_key_file;
  bool quiet = false;         // no statistics on `err`
};

// The environment variable the CLI reads the API key from when neither flag gives one.
inline constexpr char kApiKeyEnvironmentVariable[] = "BLOSSOM_API_KEY";

// The key --server calls send: --api_key (`flag`), else the file --api_key_file names (`file`,
// trimmed), else BLOSSOM_API_KEY (`env`, null or empty when unset), else "" (none). A flag's
// value shows in `ps` to every local user; the file and the variable do not. Both flags, an
// unreadable or empty file, or a key that cannot be sent (spaces, control bytes) is an
// InvalidArgument naming its source, never quoting the key.
absl::StatusOr<std::string> ResolveApiKey(const std::string& flag, const std::string& file,
                                          const char* env);

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
