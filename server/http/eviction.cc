#include "server/http/eviction.h"

namespace blossom::http::internal {

std::shared_ptr<Connection> EvictionVictim(const ConnectionMap& conns) {
  std::shared_ptr<Connection> best;
  // Lower rank wins: 0 lingering, 1 unfinished head or body, 2 idle; then the oldest.
  int best_rank = 3;
  int64_t best_since = 0;
  for (auto& [id, conn] : conns) {
    if (conn->current) continue;
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

}  // namespace blossom::http::internal
