// Start-up checks of how exposed blossom-server's gRPC port is: whether its --host is
// loopback, the warnings a port reachable from other machines deserves, and whether gRPC
// reflection (which answers without an API key) is served.
#ifndef BLOSSOM_SERVER_AUTH_EXPOSURE_H_
#define BLOSSOM_SERVER_AUTH_EXPOSURE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace blossom::auth {

// Whether a listener on `host` (a --host value) is reachable from this machine only: an IPv4
// loopback address (127.0.0.0/8, also IPv4-mapped), ::1 (bracketed or not) or "localhost".
// Anything else counts as reachable from the network, "" and host names included (a name may
// resolve to any address).
bool IsLoopbackHost(absl::string_view host);

// The warnings to log at start for a gRPC port bound to `host`: none on loopback; otherwise
// one when no API keys are configured (anyone who reaches the port may generate), and one when
// it serves no TLS (prompts, outputs and any keys cross the network in clear text).
std::vector<std::string> ExposureWarnings(absl::string_view host, bool api_keys, bool tls);

// --grpc_reflection: "auto" serves reflection without API keys and not with them (reflection
// answers without a key, so with keys it would hand the schema to anyone); true/false (also
// on/off, 1/0, yes/no) decide either way. Anything else is InvalidArgument.
absl::StatusOr<bool> ReflectionEnabled(absl::string_view flag, bool api_keys);

}  // namespace blossom::auth

#endif  // BLOSSOM_SERVER_AUTH_EXPOSURE_H_
