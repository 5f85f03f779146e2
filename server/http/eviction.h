// The eviction policy of http_server.h ("Connections"): which connection a new one replaces when
// the server is at max_connections. Kept apart from the accept loop that applies it because it
// is a pure choice over the connections' state, and the rule that keeps slow or idle clients
// from locking out prompt ones. Internal to //server/http:http_server.
#ifndef BLOSSOM_SERVER_HTTP_EVICTION_H_
#define BLOSSOM_SERVER_HTTP_EVICTION_H_

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "server/http/connection.h"

namespace blossom::http::internal {

// Every open connection of a server, by Connection::id.
using ConnectionMap = std::unordered_map<uint64_t, std::shared_ptr<Connection>>;

// The connection a new one may replace at max_connections: one already closing, else the
// one with no request in flight that has waited longest (an unfinished head before an idle
// keep-alive connection). Null if every connection has a request in flight.
// Reads the connections' I/O-thread state: call on the I/O thread only.
std::shared_ptr<Connection> EvictionVictim(const ConnectionMap& conns);

}  // namespace blossom::http::internal

#endif  // BLOSSOM_SERVER_HTTP_EVICTION_H_
