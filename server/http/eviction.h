// The policy of http_server.h ("Connections") on which connections go: the one a new connection
// replaces when the server is at max_connections, and what the timeout sweep does with each.
// Kept apart from the accept loop and the sweep that apply it because it is a pure choice over
// the connections' state, and the rule that keeps slow or idle clients from locking out prompt
// ones. Internal to //server/http:http_server.
#ifndef BLOSSOM_SERVER_HTTP_EVICTION_H_
#define BLOSSOM_SERVER_HTTP_EVICTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "server/http/connection.h"
#include "server/http/http_server.h"

namespace blossom::http::internal {

// Every open connection of a server, by Connection::id.
using ConnectionMap = std::unordered_map<uint64_t, std::shared_ptr<Connection>>;

// The connection a new one may replace at max_connections: one already closing, else the
// one with no request in flight and no unsent output that has waited longest (an unfinished
// head before an idle keep-alive connection). Null if every connection has a request in flight
// or a response still being written (its peer is reading it; the sweep closes one that stops).
// Reads the connections' I/O-thread state: call on the I/O thread only.
std::shared_ptr<Connection> EvictionVictim(const ConnectionMap& conns);

// What the timeout sweep does with a connection at `now` (NowMs()).
enum class SweepAction {
  kKeep,
  kClose,           // linger over, handshake too slow, peer reset, idle, or output stalled
  kRequestTimeout,  // the head or body deadline passed: answer 408 and close
};
// A connection is idle when it has no exchange in flight and no unsent output for
// idle_timeout_ms; output that makes no progress for as long is stalled (progress: a write, or
// the peer taking bytes from the kernel's send queue). A response still being written is
// neither idle nor timed out while its peer reads it. I/O thread only.
SweepAction SweepVerdict(Connection& conn, int64_t now, const ServerOptions& options);
// How often the sweep runs: a quarter of the shortest timeout, within [10, 250] ms.
int64_t SweepIntervalMs(const ServerOptions& options);
// The message of a kRequestTimeout's 408: which deadline (head or body) and its length.
std::string RequestTimeoutMessage(const Connection& conn, const ServerOptions& options);

}  // namespace blossom::http::internal

#endif  // BLOSSOM_SERVER_HTTP_EVICTION_H_
