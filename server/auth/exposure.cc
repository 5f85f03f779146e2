#include "server/auth/exposure.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace blossom::auth {

bool IsLoopbackHost(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  // gRPC takes an IPv6 address bracketed ("[::1]:8033"); accept it either way.
  if (absl::ConsumePrefix(&host, "[") && !absl::ConsumeSuffix(&host, "]")) return false;
  const std::string text(host);
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    // ::ffff:127.x.y.z reaches the IPv4 loopback.
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

std::vector<std::string> ExposureWarnings(absl::string_view host, bool api_keys, bool tls) {
  std::vector<std::string> warnings;
  if (IsLoopbackHost(host)) return warnings;
  const std::string where = absl::StrCat("the gRPC port binds --host ", host.empty() ? "''" : host,
                                         ", reachable from other machines");
  if (!api_keys) {
    warnings.push_back(absl::StrCat(
        where, ", and has no API keys: anyone who can reach it may generate. Pass "
               "--api_keys_file, or --host 127.0.0.1 when only this machine (e.g. a gateway "
               "beside the server) calls it."));
  }
  if (!tls) {
    warnings.push_back(absl::StrCat(
        where, ", and serves plaintext: ",
        api_keys ? "prompts, outputs and the API keys" : "prompts and outputs",
        " cross the network in clear text. Pass --tls_cert and --tls_key, or keep the port "
        "behind a TLS-terminating proxy or an encrypting network (e.g. a service mesh)."));
  }
  return warnings;
}

absl::StatusOr<bool> ReflectionEnabled(absl::string_view flag, bool api_keys) {
  const absl::string_view value = absl::StripAsciiWhitespace(flag);
  if (absl::EqualsIgnoreCase(value, "auto")) return !api_keys;
  if (absl::EqualsIgnoreCase(value, "on")) return true;
  if (absl::EqualsIgnoreCase(value, "off")) return false;
  bool enabled = false;
  if (!value.empty() && absl::SimpleAtob(value, &enabled)) return enabled;
  return absl::InvalidArgumentError(
      absl::StrCat("--grpc_reflection must be auto, true (on) or false (off), not '", flag, "'"));
}

}  // namespace blossom::auth
