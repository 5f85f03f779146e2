// Where a grammar constraint's earlier calls left off reading outputs, so that a call whose
// output continues one of them reads only its new tokens.
//
// A TokenConstraint is stateless in the output (token_constraint.h): every call gets the whole
// output so far. Reading it again from the start costs time in its length (about 0.2 us a byte
// through the GBNF matcher), so a request's steps would cost quadratic time in its output; at
// 4,000 tokens a step would spend milliseconds re-reading text it had read the step before.
// A request's calls see outputs that extend one another, so an entry keeps a reader (the matcher
// or arena the states were built with) and its states at the last few output lengths
// (checkpoints): a call resumes from the longest checkpoint its output starts with. The earlier
// checkpoints serve the calls that go back: a speculative round's rejected drafts, and beams
// forked from one parent.
//
// Entries are moved out while a call reads with them (Take) and put back after (Put), so one
// reader is used by one thread at a time. A call that finds nothing reads from the start; a
// reader's states depend only on the bytes read, never on what it read before, so the cache
// changes what a call costs, never what it allows.
//
// Thread-safe. Holds at most `max_entries` entries (the oldest put goes first), each with at
// most `max_checkpoints` checkpoints (the shortest goes first).
#ifndef BLOSSOM_ENGINE_GUIDED_RESUME_CACHE_H_
#define BLOSSOM_ENGINE_GUIDED_RESUME_CACHE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/types/span.h"

namespace blossom {

template <typename Reader, typename State>
class ResumeCache {
 public:
  struct Checkpoint {
    size_t length;  // tokens of `read` behind `state`
    State state;
  };
  struct Entry {
    explicit Entry(Reader r) : reader(std::move(r)) {}
    Reader reader;
    std::vector<int32_t> read;            // the output read so far
    std::deque<Checkpoint> checkpoints;   // ascending lengths; the last is read.size()
  };

  ResumeCache(size_t max_entries, size_t max_checkpoints)
      : max_entries_(max_entries), max_checkpoints_(max_checkpoints) {}
  ResumeCache(const ResumeCache&) = delete;
  ResumeCache& operator=(const ResumeCache&) = delete;

  // Removes and returns the entry with the longest checkpoint that `output` starts with, cut
  // back to that checkpoint (its `read` and last checkpoint are then that prefix of `output`);
  // nullptr when no entry has one. Of equal lengths, an entry `output` extends goes first. One
  // that must be cut back is taken only where it keeps more than it loses: it is likely another
  // output's, which then reads the lost tokens again (at most max_checkpoints of them).
  std::unique_ptr<Entry> Take(absl::Span<const int32_t> output) {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = entries_.end();
    size_t best_checkpoint = 0, best_length = 0;
    bool best_extends = false;
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      const Entry& e = **it;
      const size_t n = std::min(output.size(), e.read.size());
      // memcmp first: the usual case is an output that extends the entry, and memcmp compares
      // a long output several times faster than an element-wise loop.
      const bool extension =
          n == e.read.size() &&
          (n == 0 || std::memcmp(output.data(), e.read.data(), n * sizeof(int32_t)) == 0);
      const size_t common =
          extension ? n
                    : static_cast<size_t>(
                          std::mismatch(output.begin(), output.begin() + n, e.read.begin()).first -
                          output.begin());
      // The longest checkpoint within the common prefix.
      size_t k = e.checkpoints.size();
      while (k > 0 && e.checkpoints[k - 1].length > common) --k;
      if (k == 0) continue;
      const size_t length = e.checkpoints[k - 1].length;
      const bool extends = common == e.read.size();
      // Cutting back another output's entry costs that output the tokens cut when it comes
      // back; worth it only where it saves this call more (a fork far from the start).
      if (!extends && length <= e.read.size() - length) continue;
      if (best == entries_.end() || length > best_length ||
          (length == best_length && extends && !best_extends)) {
        best = it;
        best_checkpoint = k - 1;
        best_length = length;
        best_extends = extends;
      }
    }
    if (best == entries_.end()) return nullptr;
    std::unique_ptr<Entry> entry = std::move(*best);
    entries_.erase(best);
    entry->checkpoints.resize(best_checkpoint + 1);
    entry->read.resize(best_length);
    return entry;
  }

  // Records the state after reading `token` on top of the entry's last checkpoint.
  void Advance(Entry& entry, int32_t token, const State& state) const {
    entry.read.push_back(token);
    entry.checkpoints.push_back({entry.read.size(), state});
    while (entry.checkpoints.size() > max_checkpoints_) entry.checkpoints.pop_front();
  }

  void Put(std::unique_ptr<Entry> entry) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_front(std::move(entry));
    while (entries_.size() > max_entries_) entries_.pop_back();
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_.size();
  }

 private:
  const size_t max_entries_;
  const size_t max_checkpoints_;
  mutable std::mutex mu_;  // std::mutex, not absl::Mutex: TSan sees it (server/metrics/metrics.h)
  std::list<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);  // most recently put first
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_GUIDED_RESUME_CACHE_H_
