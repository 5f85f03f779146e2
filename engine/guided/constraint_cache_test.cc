#include "engine/guided/constraint_cache.h"

#include <atomic>
#include <chrono>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "engine/guided/fixture_vocabulary.h"
#include "engine/guided/regex_constraint.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(ConstraintCacheTest, ReturnsTheCompiledConstraintOfARecentText) {
  int built = 0;
  ConstraintCache cache(
      [&] {
        ++built;
        return FixtureVocabulary();
      },
      ConstraintCacheOptions{/*capacity=*/3});
  auto a = cache.JsonSchema(R"({"type": "object"})");
  auto b = cache.JsonSchema(R"({"type": "array"})");
  // Recent-only lookups answer at once: the compiled one, or NotFound without compiling.
  using Mode = ConstraintCache::Mode;
  EXPECT_TRUE(cache.JsonSchema(R"({"type": "object"})", {}, Mode::kRecentOnly).ok());
  EXPECT_TRUE(absl::IsNotFound(
      cache.JsonSchema(R"({"type": "object"})", JsonGrammarOptions{false}, Mode::kRecentOnly)
          .status()));
  EXPECT_TRUE(absl::IsNotFound(cache.Regex(R"({"type": "object"})", Mode::kRecentOnly).status()));
  auto a_again = cache.JsonSchema(R"({"type": "object"})");
  ASSERT_TRUE(a.ok() && b.ok() && a_again.ok());
  EXPECT_EQ(a->get(), a_again->get());
  EXPECT_EQ(built, 1);
  // The same text as a regex, or as a compact schema, is another constraint.
  auto regex = cache.Regex(R"({"type": "object"})");
  ASSERT_TRUE(regex.ok()) << regex.status();
  EXPECT_NE(regex->get(), a->get());
  auto compact = cache.JsonSchema(R"({"type": "object"})", JsonGrammarOptions{false});
  ASSERT_TRUE(compact.ok());
  EXPECT_NE(compact->get(), a->get());
  // Capacity 3: the array's was the least recent and is compiled again.
  auto b_again = cache.JsonSchema(R"({"type": "array"})");
  ASSERT_TRUE(b_again.ok());
  EXPECT_NE(b->get(), b_again->get());
  EXPECT_EQ(cache.JsonSchema(R"({"type": "integer", "minimum": 0})").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Regex("a(?=b)").status().code(), absl::StatusCode::kInvalidArgument);
  // A grammar is cached by its text, apart from the regex of the same text.
  EXPECT_TRUE(absl::IsNotFound(cache.Grammar("root ::= [a-z]+", Mode::kRecentOnly).status()));
  auto grammar = cache.Grammar("root ::= [a-z]+");
  EXPECT_TRUE(cache.Grammar("root ::= [a-z]+", Mode::kRecentOnly).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(cache.Regex("a(?=b)", Mode::kRecentOnly).status()))
      << "a refusal is recent too";
  auto grammar_again = cache.Grammar("root ::= [a-z]+");
  ASSERT_TRUE(grammar.ok() && grammar_again.ok()) << grammar.status();
  EXPECT_EQ(grammar->get(), grammar_again->get());
  EXPECT_EQ(cache.Grammar("root ::= root \"a\"").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Requests on several threads share the cache and the compiled constraints (and their mask
// caches): every answer equals the one a single thread gets. Run under --config=tsan too.
TEST(ConstraintCacheTest, ConcurrentRequestsGetTheSameMasks) {
  ConstraintCache cache([] { return FixtureVocabulary(); }, ConstraintCacheOptions{/*capacity=*/2});
  // Three schemas and a GBNF grammar (its matcher's arena is per call, its masks shared).
  const char* texts[] = {R"({"type": "object"})", R"({"type": "array", "items": {"type": "integer"}})",
                         R"({"type": "string", "format": "date"})",
                         R"g(root ::= "{" (""" [a-z]* """)? "}" | "[" [0-9] ("," [ ]? [0-9])* "]")g"};
  constexpr int kConstraints = 4;
  auto get = [&](int s) {
    return s == 3 ? cache.Grammar(texts[s]) : cache.JsonSchema(texts[s]);
  };
  const std::vector<std::vector<int32_t>> outputs = {
      {}, *FixtureTokenizer().Encode("{\"a\""), *FixtureTokenizer().Encode("[1, 2"),
      *FixtureTokenizer().Encode("\"2026-")};
  // The answers of one thread, by constraint and output (an error where the output leaves it).
  std::vector<std::vector<std::string>> want(kConstraints);
  for (int s = 0; s < kConstraints; ++s) {
    auto c = get(s);
    ASSERT_TRUE(c.ok()) << c.status();
    for (const auto& output : outputs) {
      auto mask = (*c)->AllowedTokens(output, kFixtureEos);
      want[s].push_back(mask.ok() ? std::string(reinterpret_cast<const char*>((*mask)->data()),
                                                (*mask)->size() * 8)
                                  : "error");
    }
  }
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const int s = (t + i) % kConstraints;
        auto c = get(s);
        if (!c.ok()) {
          ++mismatches;
          continue;
        }
        const size_t o = static_cast<size_t>(i) % outputs.size();
        auto mask = (*c)->AllowedTokens(outputs[o], kFixtureEos);
        const std::string got =
            mask.ok() ? std::string(reinterpret_cast<const char*>((*mask)->data()),
                                    (*mask)->size() * 8)
                      : "error";
        if (got != want[s][o]) ++mismatches;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// A compile that the test lets finish (Open), counting its calls; its constraint is a real one.
class GatedCompile {
 public:
  ConstraintCache::Compile Compile() {
    return [this](std::shared_ptr<const TokenVocabulary> vocabulary)
               -> absl::StatusOr<ConstraintCache::Constraint> {
      ++calls;
      open_.WaitForNotification();
      auto compiled = RegexConstraint::Create("a+", std::move(vocabulary));
      if (!compiled.ok()) return compiled.status();
      return ConstraintCache::Constraint(*std::move(compiled));
    };
  }
  void Open() {
    if (!open_.HasBeenNotified()) open_.Notify();
  }
  std::atomic<int> calls{0};

 private:
  absl::Notification open_;
};

// Polls until `done` holds (at most 20 s, then the test fails on what it waited for).
template <typename Done>
bool Eventually(Done done) {
  for (int i = 0; i < 20000 && !done(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

// A compile that throws gives its slot back and ends its flight: an Internal error, not a
// text that every later request waits for forever.
TEST(ConstraintCacheTest, ACompileThatThrowsFailsAloneAndIsTriedAgain) {
  ConstraintCacheOptions options;
  options.max_concurrent_compiles = 1;
  ConstraintCache cache([] { return FixtureVocabulary(); }, options);
  auto throws = [](std::shared_ptr<const TokenVocabulary>)
      -> absl::StatusOr<ConstraintCache::Constraint> { throw std::bad_alloc(); };
  EXPECT_TRUE(absl::IsInternal(cache.GetOrCompile("k", throws).status()));
  EXPECT_TRUE(cache.Regex("a+").ok()) << "the only slot is free";
  GatedCompile gated;
  gated.Open();
  EXPECT_TRUE(cache.GetOrCompile("k", gated.Compile()).ok()) << "the text is not remembered";
  EXPECT_EQ(cache.stats().waiting, 0);
}

TEST(ConstraintCacheTest, ConcurrentRequestsForOneNewTextCompileItOnce) {
  ConstraintCache cache([] { return FixtureVocabulary(); });
  GatedCompile gated;
  absl::StatusOr<ConstraintCache::Constraint> first, second;
  std::thread a([&] { first = cache.GetOrCompile("k", gated.Compile()); });
  ASSERT_TRUE(Eventually([&] { return cache.stats().compiles == 1; }));
  std::thread b([&] { second = cache.GetOrCompile("k", gated.Compile()); });
  ASSERT_TRUE(Eventually([&] { return cache.stats().joined == 1; }));
  gated.Open();
  a.join();
  b.join();
  ASSERT_TRUE(first.ok() && second.ok()) << first.status() << second.status();
  EXPECT_NE(first->get(), nullptr);
  EXPECT_EQ(first->get(), second->get());
  EXPECT_EQ(gated.calls.load(), 1);
  EXPECT_EQ(cache.stats().waiting, 0);
}

TEST(ConstraintCacheTest, ARefusedTextIsRefusedAgainWithoutCompiling) {
  ConstraintCache cache([] { return FixtureVocabulary(); });
  int calls = 0;
  auto refuse = [&](std::shared_ptr<const TokenVocabulary>)
      -> absl::StatusOr<ConstraintCache::Constraint> {
    ++calls;
    return absl::InvalidArgumentError("the pattern is too costly");
  };
  EXPECT_EQ(cache.GetOrCompile("bad", refuse).status().message(), "the pattern is too costly");
  EXPECT_EQ(cache.GetOrCompile("bad", refuse).status().message(), "the pattern is too costly");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(cache.stats().hits, 1);
  // Only the request's own fault is remembered: any other failure is tried again.
  auto fail = [&](std::shared_ptr<const TokenVocabulary>)
      -> absl::StatusOr<ConstraintCache::Constraint> {
    ++calls;
    return absl::InternalError("out of memory");
  };
  EXPECT_EQ(cache.GetOrCompile("flaky", fail).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(cache.GetOrCompile("flaky", fail).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(calls, 3);
  // The real compilers: an unsupported schema is compiled once.
  const int64_t compiles = cache.stats().compiles;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(cache.JsonSchema(R"({"type": "integer", "minimum": 0})").status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(cache.stats().compiles, compiles + 1);
}

// A cache with one compile slot, which a gated compile of "a" holds until Release().
class OneSlotTaken {
 public:
  explicit OneSlotTaken(ConstraintCacheOptions options)
      : cache_([] { return FixtureVocabulary(); }, WithOneSlot(options)),
        holder_([this] { held_ = cache_.GetOrCompile("a", gated_.Compile()); }) {
    started_ = Eventually([&] { return cache_.stats().compiles == 1; });
  }
  ~OneSlotTaken() { Release(); }
  void Release() {
    gated_.Open();
    if (holder_.joinable()) holder_.join();
  }
  ConstraintCache& cache() { return cache_; }
  bool started() const { return started_; }
  const absl::StatusOr<ConstraintCache::Constraint>& held() const { return held_; }

 private:
  static ConstraintCacheOptions WithOneSlot(ConstraintCacheOptions options) {
    options.max_concurrent_compiles = 1;
    return options;
  }
  GatedCompile gated_;
  ConstraintCache cache_;
  absl::StatusOr<ConstraintCache::Constraint> held_;
  std::thread holder_;
  bool started_ = false;
};

TEST(ConstraintCacheTest, BusyCompileSlotsRefuseANewTextAtOnceWhenNoneMayWait) {
  ConstraintCacheOptions options;
  options.max_waiting_compiles = 0;
  OneSlotTaken taken(options);
  ASSERT_TRUE(taken.started());
  ConstraintCache& cache = taken.cache();
  const auto start = std::chrono::steady_clock::now();
  const absl::Status busy = cache.Regex("b+").status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(busy.code(), absl::StatusCode::kResourceExhausted) << busy;
  EXPECT_NE(busy.message().find("retry"), absl::string_view::npos) << busy;
  EXPECT_EQ(cache.stats().busy_refusals, 1);
  taken.Release();
  EXPECT_TRUE(taken.held().ok());
  // The slot is free again; the refusal was not remembered.
  EXPECT_TRUE(cache.Regex("b+").ok());
  EXPECT_EQ(cache.stats().compiles, 2);
}

TEST(ConstraintCacheTest, ARequestWaitsForAFreedSlot) {
  ConstraintCacheOptions options;
  options.max_compile_wait = absl::Seconds(60);
  OneSlotTaken taken(options);
  ASSERT_TRUE(taken.started());
  ConstraintCache& cache = taken.cache();
  absl::StatusOr<ConstraintCache::Constraint> waited;
  std::thread b([&] { waited = cache.Regex("b+"); });
  const bool b_waits = Eventually([&] { return cache.stats().waiting == 1; });
  EXPECT_TRUE(b_waits);
  EXPECT_EQ(cache.stats().compiles, 1);  // b waits: one slot
  taken.Release();
  b.join();
  EXPECT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(cache.stats().compiles, 2);
  EXPECT_EQ(cache.stats().waiting, 0);
  EXPECT_EQ(cache.stats().busy_refusals, 0);
}

TEST(ConstraintCacheTest, TheWaitForASlotIsBounded) {
  ConstraintCacheOptions options;
  options.max_compile_wait = absl::Milliseconds(50);
  OneSlotTaken taken(options);
  ASSERT_TRUE(taken.started());
  const auto start = std::chrono::steady_clock::now();
  const absl::Status busy = taken.cache().Regex("b+").status();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  EXPECT_EQ(busy.code(), absl::StatusCode::kResourceExhausted) << busy;
  EXPECT_EQ(taken.cache().stats().waiting, 0);
}

}  // namespace
}  // namespace blossom
