// blossom-gateway: OpenAI- and TGI-compatible HTTP in front of a Blossom gRPC server.
//
//   blossom-gateway --backend=127.0.0.1:8033 --port=8080 [--api-keys-file=FILE]
//       [--metrics-api-keys-file=FILE] [--backend-api-key-file=FILE | --backend-api-key=KEY]
//       [--served-model-name=NAME] [--request-timeout=600] [--max-body-bytes=1048576]
//       [--host=127.0.0.1] [--backend-tls [--backend-ca-file=PEM]
//       [--backend-tls-cert=PEM --backend-tls-key=PEM]] [--tls-cert=PEM --tls-key=PEM]
//       [--max-connections-per-ip=256] [--drain-timeout=30]
//
// Flags may be spelled with dashes or underscores. SIGINT/SIGTERM drain it: /health turns 503,
// new requests get 503 with Retry-After and every response closes its connection, in-flight
// ones get --drain-timeout to finish (and their clients to read what is still queued for them).
// Those still running then are ended for their clients (an error event on a stream, a 503 on a
// request not yet answered) and cancelled on the backend, and it exits 0. A second signal ends
// the drain at once the same way; a third skips the last writes.
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "clients/gateway/backend_channel.h"
#include "clients/gateway/credential_files.h"
#include "clients/gateway/gateway.h"
#include "grpcpp/grpcpp.h"
#include "server/auth/api_keys.h"
#include "server/http/http_server.h"
#include "server/logging/log_setup.h"
#include "spdlog/spdlog.h"
#include "tools/cli/dashed_flags.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "Address to listen on (0.0.0.0 for all).");
ABSL_FLAG(int, port, 8080, "HTTP port (0 = ephemeral).");
ABSL_FLAG(std::string, backend, "127.0.0.1:8033",
          "host:port of the Blossom gRPC server (blossom-server's default --port is 8033).");
ABSL_FLAG(bool, backend_tls, false, "Connect to the backend over TLS.");
ABSL_FLAG(std::string, backend_ca_file, "",
          "PEM CA bundle that signs the backend's certificate (--backend-tls; default: the "
          "system roots).");
ABSL_FLAG(std::string, backend_tls_cert, "",
          "PEM client certificate chain the gateway presents to the backend, for a server that "
          "requires one (blossom-server --tls_client_ca); with --backend-tls-key and "
          "--backend-tls.");
ABSL_FLAG(std::string, backend_tls_key, "", "PEM private key of --backend-tls-cert.");
ABSL_FLAG(int, max_reconnect_backoff_ms, 1000,
          "Longest wait between reconnect attempts to a backend that went away.");
ABSL_FLAG(std::string, api_keys_file, "",
          "File with one API key per line; if set, every route but /live and /health needs "
          "'Authorization: Bearer <key>' (/metrics also takes a --metrics-api-keys-file key).");
ABSL_FLAG(std::string, metrics_api_keys_file, "",
          "File with one API key per line (as --api-keys-file) accepted on /metrics only, e.g. "
          "Prometheus's scrape key; the --api-keys-file keys work there too. If set, /metrics "
          "needs a key.");
ABSL_FLAG(std::string, backend_api_key, "",
          "API key sent to the gRPC server; if empty the client's Authorization is forwarded. "
          "Visible to other local users (ps, /proc): prefer --backend-api-key-file.");
ABSL_FLAG(std::string, backend_api_key_file, "",
          "File holding the API key sent to the gRPC server (surrounding whitespace trimmed; "
          "an empty file is an error); instead of --backend-api-key.");
ABSL_FLAG(std::string, served_model_name, "",
          "Model name clients must use and that /v1/models reports (default: the backend's).");
ABSL_FLAG(double, request_timeout, 600, "gRPC deadline per generation request, in seconds.");
ABSL_FLAG(std::string, chat_template, "",
          "JSON file of per-role prefix/suffix strings for /v1/chat/completions prompts "
          "(clients/gateway/README.md); empty: the built-in User:/Assistant: layout.");
ABSL_FLAG(int64_t, max_body_bytes, 1 << 20, "Largest accepted request body (413 above).");
ABSL_FLAG(int64_t, max_header_bytes, 16 << 10, "Largest accepted request head (431 above).");
ABSL_FLAG(int, max_connections, 4096, "Concurrent HTTP connections (503 above).");
ABSL_FLAG(int, max_connections_per_ip, 256,
          "Concurrent HTTP connections from one client address (503 above; 0 = no cap).");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain: serve HTTPS (with --tls-key) instead of plain HTTP.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert.");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error, critical, off.");
ABSL_FLAG(std::string, log_format, "text",
          "text, or json: one JSON object per line (timestamp, level, target, thread, message) "
          "for log collectors.");
ABSL_FLAG(int, handler_threads, 4, "Threads that parse requests and start gRPC calls.");
ABSL_FLAG(double, drain_timeout, 30,
          "On SIGTERM, seconds in-flight requests get to finish (new ones get 503) before the "
          "rest are ended with an error and cancelled. A second signal ends the drain at once.");

namespace {

// How long the answers of requests ended by the drain (error events, 503s) get to be written.
constexpr absl::Duration kAbortFlush = absl::Seconds(2);

enum class Waited { kDone, kTimedOut, kSignalled };

// Polls `done` every 10 ms until it holds, `until` passes, or a stop signal arrives. The stop
// signals stay blocked in every thread and are taken here (sigtimedwait), so a signal sent at
// any moment is seen by the next wait, never lost or delivered to another thread.
Waited WaitUntil(const std::function<bool()>& done, absl::Time until, const sigset_t& signals) {
  for (;;) {
    if (done()) return Waited::kDone;
    const absl::Time now = absl::Now();
    if (now >= until) return Waited::kTimedOut;
    const timespec step = absl::ToTimespec(std::min(absl::Milliseconds(10), until - now));
    const int signal_number = sigtimedwait(&signals, nullptr, &step);
    if (signal_number > 0) {
      spdlog::warn("signal {}: ending the drain now", signal_number);
      return Waited::kSignalled;
    }
  }
}

}  // namespace


int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("OpenAI- and TGI-compatible HTTP gateway for a Blossom gRPC server.");
  blossom::NormalizeDashedFlags(argc, argv);  // --api-keys-file and --api_keys_file alike
  absl::ParseCommandLine(argc, argv);
  if (absl::Status logging =
          blossom::ConfigureLogging(absl::GetFlag(FLAGS_log_level),
                                    absl::GetFlag(FLAGS_log_format), "blossom-gateway");
      !logging.ok()) {
    spdlog::error("{}", std::string(logging.message()));
    return 2;
  }

  // Block the stop signals in every thread; main waits for them with sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  blossom::gateway::GatewayOptions options;
  options.served_model_name = absl::GetFlag(FLAGS_served_model_name);
  options.backend_api_key = absl::GetFlag(FLAGS_backend_api_key);
  if (const std::string path = absl::GetFlag(FLAGS_backend_api_key_file); !path.empty()) {
    if (!options.backend_api_key.empty()) {
      spdlog::error("give one of --backend-api-key and --backend-api-key-file");
      return 2;
    }
    absl::StatusOr<std::string> key =
        blossom::gateway::ReadApiKeyFile("--backend-api-key-file", path);
    if (!key.ok()) {
      spdlog::error("{}", std::string(key.status().message()));
      return 2;
    }
    options.backend_api_key = *std::move(key);
  } else if (!options.backend_api_key.empty()) {
    // It is sent as gRPC metadata, which aborts the process on anything else.
    if (absl::Status usable = blossom::gateway::CheckApiKey("--backend-api-key",
                                                            options.backend_api_key);
        !usable.ok()) {
      spdlog::error("{}", std::string(usable.message()));
      return 2;
    }
  }
  const double timeout = absl::GetFlag(FLAGS_request_timeout);
  if (!(timeout > 0)) {
    spdlog::error("--request-timeout must be positive");
    return 2;
  }
  options.request_timeout = absl::Seconds(timeout);
  // Loaded as the server loads its own: a line no client could present stops the start, a
  // short key is warned about by line (never quoting it).
  auto load_keys = [](const char* flag, const std::string& path) {
    auto keys = blossom::auth::ApiKeys::LoadFile(path);
    if (!keys.ok()) {
      spdlog::error("{}: {}", flag, keys.status().ToString());
    } else if (!keys->short_key_lines().empty()) {
      spdlog::warn("{}: the keys on line(s) {} are shorter than {} characters and may be guessed; "
                   "use random keys (e.g. `openssl rand -hex 32`)",
                   flag, absl::StrJoin(keys->short_key_lines(), ", "),
                   blossom::auth::kMinStrongKeyLength);
    }
    return keys;
  };
  if (const std::string path = absl::GetFlag(FLAGS_api_keys_file); !path.empty()) {
    auto keys = load_keys("--api-keys-file", path);
    if (!keys.ok()) return 2;
    options.api_keys = std::move(*keys);
  }
  if (const std::string path = absl::GetFlag(FLAGS_metrics_api_keys_file); !path.empty()) {
    auto keys = load_keys("--metrics-api-keys-file", path);
    if (!keys.ok()) return 2;
    options.metrics_api_keys = std::move(*keys);
  }
  if (!options.backend_api_key.empty() && !options.api_keys.enabled()) {
    // Every caller who can reach the port then runs generations with the backend's key.
    spdlog::warn(
        "the gateway holds a backend API key but checks no client keys (no --api-keys-file): "
        "anyone who can reach its port calls the backend with that key");
  }
  if (const std::string path = absl::GetFlag(FLAGS_chat_template); !path.empty()) {
    auto chat_template = blossom::gateway::ChatTemplate::FromFile(path);
    if (!chat_template.ok()) {
      spdlog::error("{}", chat_template.status().ToString());
      return 2;
    }
    options.chat_template = std::move(*chat_template);
  }

  blossom::gateway::BackendChannelOptions channel_options;
  channel_options.target = absl::GetFlag(FLAGS_backend);
  channel_options.tls = absl::GetFlag(FLAGS_backend_tls);
  channel_options.ca_file = absl::GetFlag(FLAGS_backend_ca_file);
  channel_options.cert_file = absl::GetFlag(FLAGS_backend_tls_cert);
  channel_options.key_file = absl::GetFlag(FLAGS_backend_tls_key);
  channel_options.max_reconnect_backoff_ms = absl::GetFlag(FLAGS_max_reconnect_backoff_ms);
  auto channel = blossom::gateway::MakeBackendChannel(channel_options);
  if (!channel.ok()) {
    spdlog::error("{}", std::string(channel.status().message()));
    return 2;
  }
  auto gateway = std::make_unique<blossom::gateway::Gateway>(*channel, std::move(options));

  blossom::http::ServerOptions http_options;
  http_options.host = absl::GetFlag(FLAGS_host);
  http_options.port = absl::GetFlag(FLAGS_port);
  http_options.max_body_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_max_body_bytes));
  http_options.max_header_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_max_header_bytes));
  http_options.max_connections = absl::GetFlag(FLAGS_max_connections);
  http_options.max_connections_per_ip = absl::GetFlag(FLAGS_max_connections_per_ip);
  http_options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  http_options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  if (http_options.tls_cert_file.empty() != http_options.tls_key_file.empty()) {
    spdlog::error("--tls-cert and --tls-key go together");
    return 2;
  }
  if (http_options.max_connections_per_ip < 0) {
    spdlog::error("--max-connections-per-ip must be 0 (no cap) or positive");
    return 2;
  }
  http_options.handler_threads = absl::GetFlag(FLAGS_handler_threads);
  // The gateway outlives the HTTP server (declared first, destroyed after it).
  http_options.error_response = [g = gateway.get()](int status, const std::string& message,
                                                    const std::string& target) {
    return g->ProtocolErrorResponse(status, message, target);
  };
  auto server = blossom::http::Server::Start(
      http_options, [g = gateway.get()](const blossom::http::Request& request,
                                        std::shared_ptr<blossom::http::ResponseWriter> writer) {
        g->Handle(request, std::move(writer));
      });
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    return 1;
  }
  spdlog::info("blossom-gateway listening on {}://{}:{}, backend {}",
               http_options.tls_cert_file.empty() ? "http" : "https", http_options.host,
               (*server)->port(), absl::GetFlag(FLAGS_backend));

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  const double drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  spdlog::info("signal {}: draining ({} calls in flight, timeout {} s; a second signal ends it)",
               signal_number, gateway->pending_calls(), drain_timeout);
  // Keep-alive ends first, so that every 503 of the drain closes its connection and pooled
  // clients leave this gateway; load balancers see /health turn 503.
  (*server)->EndKeepAlive();
  gateway->StartDraining();
  const absl::Time deadline = absl::Now() + absl::Seconds(drain_timeout);
  const Waited calls = WaitUntil([&] { return gateway->pending_calls() == 0; }, deadline,
                                 stop_signals);
  int later_signals = calls == Waited::kSignalled ? 1 : 0;
  absl::Time flush_until = std::max(deadline, absl::Now() + kAbortFlush);
  bool aborted = false;
  // Closing the sockets would cut the streams off mid-event (curl: "transfer closed with
  // outstanding read data remaining"): each request still running gets its error instead.
  auto abort_calls = [&](const char* why) {
    spdlog::warn("{}: ending {} calls", why, gateway->pending_calls());
    gateway->AbortInFlight();
    aborted = true;
    flush_until = absl::Now() + kAbortFlush;
  };
  if (calls != Waited::kDone) abort_calls(calls == Waited::kSignalled ? "signal" : "drain timeout");
  // The last bytes (the end of a stream, [DONE], the terminating chunk, the aborted requests'
  // errors) may still be queued for slow readers, and Stop() would discard them: they get the
  // rest of the drain timeout, or kAbortFlush after an abort or a second signal; a third signal
  // stops at once. Drain() also stops accepting.
  for (;;) {
    const Waited written = WaitUntil(
        [&] { return gateway->pending_calls() == 0 && (*server)->Drain(absl::Now()).ok(); },
        flush_until, stop_signals);
    if (written == Waited::kDone) break;
    if (written == Waited::kSignalled) ++later_signals;
    // A call that started after the first wait saw none (its handler was past the draining
    // check when the signal came) is ended like the others, once.
    if (!aborted && gateway->pending_calls() > 0) {
      abort_calls(written == Waited::kSignalled ? "signal" : "drain timeout");
      continue;
    }
    if (written == Waited::kSignalled && later_signals < 2) {
      flush_until = std::min(flush_until, absl::Now() + kAbortFlush);
      continue;
    }
    if (written == Waited::kTimedOut) {
      spdlog::warn("drain: {} calls in flight, {}", gateway->pending_calls(),
                   std::string((*server)->Drain(absl::Now()).message()));
    }
    break;
  }
  // Calls still running (a third signal) are cancelled here, not left to Stop(): a stream whose
  // HTTP side already ended has no OnClose to cancel it, and ~Gateway would wait for its
  // deadline (--request-timeout).
  if (gateway->pending_calls() > 0) gateway->AbortInFlight();
  (*server)->Stop();  // cancels what is left through OnClose
  gateway.reset();    // waits for the cancelled gRPC calls to finish
  return 0;
}
