// The compiled constraints (JSON schemas, regular expressions, GBNF grammars) of the
// structured-output requests a server saw last, by their text, over the server's vocabulary.
//
// Compiling is the costly part of a structured-output request (up to about a second of one core
// for a hostile schema, bounded by the compilers' work limits), and it runs on the caller's thread
// (the server's compile pool, server/worker_pool; kRecentOnly for threads that must not block),
// so the cache keeps it from becoming a way to overload the server:
//  - a text compiled once is not compiled again while it is recent, and that includes a text
//    that failed to compile: the compilers are deterministic (their limits count work, not
//    time), so the same text gets the same InvalidArgument at once;
//  - requests for a text that is being compiled wait for that compile instead of starting
//    their own (a burst of requests with one new schema compiles it once);
//  - at most `max_concurrent_compiles` texts compile at once, so compiles cannot take every
//    core from the engine; a request that finds every slot busy waits for one, at most
//    `max_compile_wait` and behind at most `max_waiting_compiles` others, and is otherwise
//    refused at once with ResourceExhausted (retryable: nothing is wrong with the request).
// Thread-safe. Invariants (under mu_): `compiling_` counts the compiles running outside the
// lock, at most max_concurrent_compiles; every key in `in_flight_` is being compiled by exactly
// one thread, which removes it and wakes the waiters when done; `recent_` holds at most
// `capacity` entries, each a compiled constraint or a compile error.
#ifndef BLOSSOM_ENGINE_GUIDED_CONSTRAINT_CACHE_H_
#define BLOSSOM_ENGINE_GUIDED_CONSTRAINT_CACHE_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/guided/json_grammar.h"
#include "engine/guided/token_vocabulary.h"
#include "engine/sampling/token_constraint.h"

namespace blossom {

struct ConstraintCacheOptions {
  size_t capacity = 16;  // texts kept, compiled or refused
  // 0: a quarter of the hardware threads, at least 1.
  int max_concurrent_compiles = 0;
  // Requests waiting for a compile slot beyond these are refused at once.
  int max_waiting_compiles = 32;
  absl::Duration max_compile_wait = absl::Seconds(10);
};

class ConstraintCache {
 public:
  using Constraint = std::shared_ptr<const TokenConstraint>;
  using Compile =
      std::function<absl::StatusOr<Constraint>(std::shared_ptr<const TokenVocabulary>)>;

  struct Stats {
    int64_t compiles = 0;       // compiles started
    int64_t hits = 0;           // answered from recent texts (failures included)
    int64_t joined = 0;         // waited for another request's compile of the same text
    int64_t busy_refusals = 0;  // refused with ResourceExhausted: no compile slot
    int64_t waiting = 0;        // now waiting for a slot or for a compile in flight
  };

  // `vocabulary` is called on first use (the trie of a 250k vocabulary takes a fraction of a
  // second), so servers that never see a grammar never pay for it.
  explicit ConstraintCache(std::function<std::shared_ptr<const TokenVocabulary>()> vocabulary,
                           ConstraintCacheOptions options = {});

  // kRecentOnly: answer only from the recent texts (a compiled constraint or a remembered
  // refusal), else NotFound at once, compiling and waiting for nothing: for a caller on a thread
  // that must not block (the server's gRPC threads), which then compiles elsewhere.
  enum class Mode { kCompile, kRecentOnly };

  // InvalidArgument naming the schema's, the pattern's or the grammar's problem;
  // ResourceExhausted when every compile slot stayed busy (see the class comment); Internal
  // if the compile threw; NotFound only with kRecentOnly.
  absl::StatusOr<Constraint> JsonSchema(absl::string_view schema_json,
                                        JsonGrammarOptions options = {},
                                        Mode mode = Mode::kCompile);
  absl::StatusOr<Constraint> Regex(absl::string_view pattern, Mode mode = Mode::kCompile);
  absl::StatusOr<Constraint> Grammar(absl::string_view gbnf, Mode mode = Mode::kCompile);

  // The recent constraint of `key`, else `compile`'s, under the rules above (the three kinds
  // above go through here with their own keys; tests use it with compiles they control).
  // Only InvalidArgument failures are remembered.
  absl::StatusOr<Constraint> GetOrCompile(std::string key, const Compile& compile,
                                          Mode mode = Mode::kCompile);

  Stats stats() const;
  int max_concurrent_compiles() const { return max_concurrent_; }

 private:
  struct Flight;  // one compile in progress, that requests for its key wait for

  static std::string JsonKey(absl::string_view schema_json, JsonGrammarOptions options);
  // Made on first use, outside mu_ (a 250k vocabulary's trie takes a fraction of a second).
  std::shared_ptr<const TokenVocabulary> Vocabulary();
  // The recent entry of `key`, moved to the front; null if none.
  const absl::StatusOr<Constraint>* FindRecentLocked(const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::function<std::shared_ptr<const TokenVocabulary>()> make_vocabulary_;
  const ConstraintCacheOptions options_;
  const int max_concurrent_;
  mutable std::mutex mu_;  // std::mutex, not absl::Mutex: TSan sees it (server/metrics/metrics.h)
  std::condition_variable slot_freed_;
  std::mutex vocabulary_mu_;
  std::shared_ptr<const TokenVocabulary> vocabulary_ ABSL_GUARDED_BY(vocabulary_mu_);
  // Most recent first, by kind, options and text.
  std::list<std::pair<std::string, absl::StatusOr<Constraint>>> recent_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Flight>> in_flight_ ABSL_GUARDED_BY(mu_);
  int compiling_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_for_slot_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_CONSTRAINT_CACHE_H_
