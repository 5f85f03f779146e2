#include "engine/guided/constraint_cache.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/guided/grammar_constraint.h"
#include "engine/guided/json_constraint.h"
#include "engine/guided/regex_constraint.h"

namespace blossom {
namespace {

// A compiled constraint of any kind, as the cache keeps it.
template <typename T>
absl::StatusOr<ConstraintCache::Constraint> AsTokenConstraint(
    absl::StatusOr<std::shared_ptr<const T>> compiled) {
  if (!compiled.ok()) return compiled.status();
  return ConstraintCache::Constraint(*std::move(compiled));
}

int DefaultConcurrentCompiles() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency() / 4));
}

}  // namespace

struct ConstraintCache::Flight {
  std::condition_variable done_cv;  // waits under the cache's mu_
  bool done = false;
  absl::StatusOr<Constraint> result;
};

ConstraintCache::ConstraintCache(std::function<std::shared_ptr<const TokenVocabulary>()> vocabulary,
                                 ConstraintCacheOptions options)
    : make_vocabulary_(std::move(vocabulary)),
      options_(options),
      max_concurrent_(options.max_concurrent_compiles > 0 ? options.max_concurrent_compiles
                                                          : DefaultConcurrentCompiles()) {}

std::string ConstraintCache::JsonKey(absl::string_view schema_json, JsonGrammarOptions options) {
  return absl::StrCat(options.allow_whitespace ? "json:" : "compact json:", schema_json);
}

absl::StatusOr<ConstraintCache::Constraint> ConstraintCache::JsonSchema(
    absl::string_view schema_json, JsonGrammarOptions options, Mode mode) {
  return GetOrCompile(
      JsonKey(schema_json, options),
      [&](std::shared_ptr<const TokenVocabulary> vocabulary) {
        return AsTokenConstraint(
            JsonSchemaConstraint::Create(schema_json, options, std::move(vocabulary)));
      },
      mode);
}

absl::StatusOr<ConstraintCache::Constraint> ConstraintCache::Regex(absl::string_view pattern,
                                                                   Mode mode) {
  return GetOrCompile(
      absl::StrCat("regex:", pattern),
      [&](std::shared_ptr<const TokenVocabulary> vocabulary) {
        return AsTokenConstraint(RegexConstraint::Create(pattern, std::move(vocabulary)));
      },
      mode);
}

absl::StatusOr<ConstraintCache::Constraint> ConstraintCache::Grammar(absl::string_view gbnf,
                                                                     Mode mode) {
  return GetOrCompile(
      absl::StrCat("gbnf:", gbnf),
      [&](std::shared_ptr<const TokenVocabulary> vocabulary) {
        return AsTokenConstraint(GrammarConstraint::Create(gbnf, std::move(vocabulary)));
      },
      mode);
}

const absl::StatusOr<ConstraintCache::Constraint>* ConstraintCache::FindRecentLocked(
    const std::string& key) {
  for (auto it = recent_.begin(); it != recent_.end(); ++it) {
    if (it->first == key) {
      recent_.splice(recent_.begin(), recent_, it);
      return &recent_.front().second;
    }
  }
  return nullptr;
}

std::shared_ptr<const TokenVocabulary> ConstraintCache::Vocabulary() {
  std::lock_guard<std::mutex> lock(vocabulary_mu_);
  if (vocabulary_ == nullptr) vocabulary_ = make_vocabulary_();
  return vocabulary_;
}

absl::StatusOr<ConstraintCache::Constraint> ConstraintCache::GetOrCompile(
    std::string key, const Compile& compile, Mode mode) {
  std::unique_lock<std::mutex> lock(mu_);
  // Saturated: an infinite (or a year's) wait must not overflow the clock.
  const auto deadline =
      std::chrono::steady_clock::now() +
      absl::ToChronoNanoseconds(std::min(options_.max_compile_wait, absl::Hours(24 * 365)));
  bool queued = false;  // counted in waiting_for_slot_
  auto leave_queue = [&] {
    if (!queued) return;
    queued = false;
    --waiting_for_slot_;
    --stats_.waiting;
  };
  // Each pass: the text may have been compiled, or started, while this request waited.
  while (true) {
    if (const absl::StatusOr<Constraint>* recent = FindRecentLocked(key)) {
      leave_queue();
      ++stats_.hits;
      return *recent;
    }
    if (mode == Mode::kRecentOnly) {
      return absl::NotFoundError("structured output: the constraint is not compiled yet");
    }
    auto flight_it = in_flight_.find(key);
    if (flight_it != in_flight_.end()) {
      leave_queue();
      // Bounded by that compile's own work limits.
      std::shared_ptr<Flight> flight = flight_it->second;
      ++stats_.joined;
      ++stats_.waiting;
      flight->done_cv.wait(lock, [&] { return flight->done; });
      --stats_.waiting;
      return flight->result;
    }
    if (compiling_ < max_concurrent_) break;
    if (!queued) {
      if (waiting_for_slot_ >= options_.max_waiting_compiles) {
        ++stats_.busy_refusals;
        return absl::ResourceExhaustedError(absl::StrCat(
            "structured output: the server is compiling ", compiling_, " other constraints and ",
            waiting_for_slot_, " more wait for it; retry shortly"));
      }
      queued = true;
      ++waiting_for_slot_;
      ++stats_.waiting;
    }
    if (slot_freed_.wait_until(lock, deadline) == std::cv_status::timeout &&
        compiling_ >= max_concurrent_ && FindRecentLocked(key) == nullptr &&
        in_flight_.count(key) == 0) {
      leave_queue();
      ++stats_.busy_refusals;
      return absl::ResourceExhaustedError(absl::StrCat(
          "structured output: no compile slot freed within ",
          absl::FormatDuration(options_.max_compile_wait), " (the server is compiling ",
          compiling_, " other constraints); retry shortly"));
    }
  }
  leave_queue();
  ++compiling_;
  ++stats_.compiles;
  auto flight = std::make_shared<Flight>();
  in_flight_.emplace(key, flight);
  lock.unlock();
  // Outside the lock: a large schema does not hold up requests with warm ones. Whatever
  // happens, the slot is given back and the flight ended (its waiters have no deadline).
  absl::StatusOr<Constraint> constraint;
  try {
    constraint = compile(Vocabulary());
  } catch (const std::exception& e) {
    constraint = absl::InternalError(absl::StrCat("structured output: the compile failed: ",
                                                  e.what()));
  } catch (...) {
    constraint = absl::InternalError("structured output: the compile failed");
  }
  lock.lock();
  --compiling_;
  in_flight_.erase(key);
  flight->result = constraint;
  flight->done = true;
  if (constraint.ok() || constraint.status().code() == absl::StatusCode::kInvalidArgument) {
    recent_.emplace_front(std::move(key), constraint);
    if (recent_.size() > options_.capacity) recent_.pop_back();
  }
  lock.unlock();
  flight->done_cv.notify_all();
  // Every slot waiter re-checks: one takes the slot; one whose text this was returns it.
  slot_freed_.notify_all();
  return constraint;
}

ConstraintCache::Stats ConstraintCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace blossom
