#include "engine/guided/resume_cache.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

// A reader that counts the tokens it has been given; its state is the output read as text.
struct CountingReader {
  int tokens_read = 0;
};
using Cache = ResumeCache<CountingReader, std::string>;

// Reads `output` as a constraint does: resumes where the cache allows, else from the start.
// Returns how many tokens this call read.
int Read(Cache& cache, const std::vector<int32_t>& output) {
  std::unique_ptr<Cache::Entry> entry = cache.Take(output);
  if (entry == nullptr) {
    entry = std::make_unique<Cache::Entry>(CountingReader());
    entry->checkpoints.push_back({0, ""});
  }
  std::string state = entry->checkpoints.back().state;
  EXPECT_EQ(entry->checkpoints.back().length, entry->read.size());
  const int before = entry->reader.tokens_read;
  for (size_t i = entry->read.size(); i < output.size(); ++i) {
    ++entry->reader.tokens_read;
    state += std::to_string(output[i]) + ",";
    cache.Advance(*entry, output[i], state);
  }
  // The state resumed from is the one a whole read reaches.
  std::string whole;
  for (int32_t t : output) whole += std::to_string(t) + ",";
  EXPECT_EQ(state, whole);
  const int read = entry->reader.tokens_read - before;
  cache.Put(std::move(entry));
  return read;
}

TEST(ResumeCacheTest, AnExtendedOutputReadsOnlyItsNewTokens) {
  Cache cache(4, 8);
  std::vector<int32_t> output = {5};
  EXPECT_EQ(Read(cache, output), 1);
  for (int32_t t = 6; t < 40; ++t) {
    output.push_back(t);
    EXPECT_EQ(Read(cache, output), 1) << "at length " << output.size();
  }
  EXPECT_EQ(cache.size(), 1u);
  output.push_back(1);
  output.push_back(2);
  EXPECT_EQ(Read(cache, output), 2);
}

TEST(ResumeCacheTest, ShorterAndForkedOutputsResumeFromAnEarlierCheckpoint) {
  Cache cache(4, 8);
  std::vector<int32_t> output;
  for (int32_t t = 0; t < 20; ++t) output.push_back(t);
  EXPECT_EQ(Read(cache, output), 20);
  // Rejected drafts: the next output is 3 shorter, plus one new token.
  std::vector<int32_t> shorter(output.begin(), output.end() - 3);
  shorter.push_back(99);
  EXPECT_EQ(Read(cache, shorter), 1);
  // A fork 5 tokens back reads those again (and its one new token).
  std::vector<int32_t> fork(shorter.begin(), shorter.end() - 5);
  fork.push_back(77);
  EXPECT_EQ(Read(cache, fork), 1);
  // Past the kept checkpoints (8), a fork reads from the start.
  std::vector<int32_t> far(output.begin(), output.begin() + 2);
  far.push_back(55);
  EXPECT_EQ(Read(cache, far), 3);
}

TEST(ResumeCacheTest, UnrelatedOutputsKeepTheirOwnEntries) {
  Cache cache(4, 8);
  std::vector<int32_t> a = {1, 2, 3}, b = {1, 9, 9};
  EXPECT_EQ(Read(cache, a), 3);
  // b shares only a's first token: cutting a's entry back would lose a more than b gains, so b
  // reads from the start, into an entry of its own.
  EXPECT_EQ(Read(cache, b), 3);
  EXPECT_EQ(cache.size(), 2u);
  for (int32_t t = 0; t < 20; ++t) {
    a.push_back(t);
    b.push_back(t);
    EXPECT_EQ(Read(cache, a), 1);
    EXPECT_EQ(Read(cache, b), 1);
  }
  // A new output cuts no entry back to its start; it makes its own.
  EXPECT_EQ(Read(cache, {}), 0);
  EXPECT_EQ(Read(cache, {1}), 1);
  EXPECT_EQ(Read(cache, {1, 2}), 1);
  a.push_back(4);
  EXPECT_EQ(Read(cache, a), 1);
  EXPECT_EQ(cache.size(), 3u);
}

TEST(ResumeCacheTest, KeepsAtMostMaxEntriesTheOldestGoingFirst) {
  Cache cache(2, 8);
  EXPECT_EQ(Read(cache, {1, 1}), 2);
  EXPECT_EQ(Read(cache, {2, 2}), 2);
  EXPECT_EQ(Read(cache, {3, 3}), 2);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(Read(cache, {3, 3, 3}), 1);
  EXPECT_EQ(Read(cache, {2, 2, 2}), 1);
  EXPECT_EQ(Read(cache, {1, 1, 1}), 3);  // evicted
}

}  // namespace
}  // namespace blossom
