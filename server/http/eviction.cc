#include "server/http/eviction.h"

#include <algorithm>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"

namespace blossom::http::internal {

std::shared_ptr<Connection> EvictionVictim(const ConnectionMap& conns) {
  std::shared_ptr<Connection> best;
  // Lower rank wins: 0 lingering, 1 unfinished head or body, 2 idle; then the oldest.
  int best_rank = 3;
  int64_t best_since = 0;
  for (auto& [id, conn] : conns) {
    // A finished exchange whose response is still being written is in flight as far as its
    // peer is concerned (closing it would cut the response, and a 408 sent now would land in
    // the middle of it).
    if (conn->current || conn->HasUnsentOutput()) continue;
    int rank;
    int64_t since;
    if (conn->lingering) {
      rank = 0;
      since = conn->linger_deadline;
    } else if (conn->head_start != 0 || conn->body_start != 0) {
      rank = 1;
      since = conn->head_start != 0 ? conn->head_start : conn->body_start;
    } else {
      rank = 2;
      since = conn->last_activity;
    }
    if (rank < best_rank || (rank == best_rank && since < best_since)) {
      best = conn;
      best_rank = rank;
      best_since = since;
    }
  }
  return best;
}

SweepAction SweepVerdict(Connection& conn, int64_t now, const ServerOptions& options) {
  if (conn.lingering) return now >= conn.linger_deadline ? SweepAction::kClose : SweepAction::kKeep;
  if (conn.handshaking) {
    return now - conn.head_start > options.header_timeout_ms ? SweepAction::kClose
                                                              : SweepAction::kKeep;
  }
  if (conn.peer_eof && PeerReset(conn.stream.tcp())) return SweepAction::kClose;
  size_t unsent;
  int64_t last_write_progress;
  {
    std::lock_guard<std::mutex> lock(conn.mu);
    unsent = conn.UnsentLocked();
    if (unsent > 0) {
      // The kernel's send buffer (megabytes, autotuned) may take long to drain far enough for
      // our next write to go out: a peer reading from it is making progress all the same.
      const size_t queued = KernelSendQueue(conn.stream.tcp());
      if (queued < conn.kernel_queue) conn.last_write_progress = now;
      conn.kernel_queue = queued;
    } else {
      conn.kernel_queue = 0;  // the next response's first sample is no progress
    }
    last_write_progress = conn.last_write_progress;
  }
  const bool stalled = unsent > 0 && now - last_write_progress > options.idle_timeout_ms;
  const bool idle =
      !conn.current && unsent == 0 && now - conn.last_activity > options.idle_timeout_ms;
  if (stalled || idle) return SweepAction::kClose;
  if (!conn.current && !conn.close_after_response &&
      ((conn.head_start != 0 && now - conn.head_start > options.header_timeout_ms) ||
       (conn.body_start != 0 && now - conn.body_start > options.body_timeout_ms))) {
    return SweepAction::kRequestTimeout;
  }
  return SweepAction::kKeep;
}

int64_t SweepIntervalMs(const ServerOptions& options) {
  const int64_t shortest =
      std::min({options.idle_timeout_ms, options.header_timeout_ms, options.body_timeout_ms});
  return std::max<int64_t>(10, std::min<int64_t>(250, shortest / 4));
}

std::string RequestTimeoutMessage(const Connection& conn, const ServerOptions& options) {
  const bool head = conn.head_start != 0;
  return absl::StrCat(head ? "request head" : "request body", " not received within ",
                      (head ? options.header_timeout_ms : options.body_timeout_ms) / 1000.0, " s");
}

}  // namespace blossom::http::internal
