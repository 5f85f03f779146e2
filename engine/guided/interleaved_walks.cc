#include "engine/guided/interleaved_walks.h"

#include <random>
#include <vector>

#include "engine/guided/fixture_vocabulary.h"
#include "gtest/gtest.h"

namespace blossom {

void ExpectInterleavedCallsMatchFresh(
    const TokenConstraint& shared,
    const std::function<std::shared_ptr<const TokenConstraint>()>& fresh, int outputs, int steps,
    uint32_t seed) {
  const int32_t vocab = FixtureTokenizer().vocab_size();
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> grown(static_cast<size_t>(outputs));
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t>& output = grown[rng() % grown.size()];
    std::vector<int32_t> asked = output;
    const uint32_t kind = rng() % 8;
    if (kind == 0 && !asked.empty()) {
      asked.resize(rng() % asked.size());  // a shorter prefix
    } else if (kind == 1) {
      const std::vector<int32_t>& other = grown[rng() % grown.size()];
      output.assign(other.begin(), other.begin() + (other.empty() ? 0 : rng() % other.size()));
      asked = output;  // a fork from another output's prefix
    }
    auto mask = shared.AllowedTokens(asked, kFixtureEos);
    auto want = fresh()->AllowedTokens(asked, kFixtureEos);
    ASSERT_EQ(mask.ok(), want.ok()) << mask.status() << " vs " << want.status();
    if (!mask.ok()) return;
    ASSERT_EQ(**mask, **want) << "step " << step << ", output of " << asked.size() << " tokens";
    if (asked.size() != output.size()) continue;
    std::vector<int32_t> allowed = AllowedIds(**mask, vocab);
    allowed.erase(std::remove(allowed.begin(), allowed.end(), kFixtureEos), allowed.end());
    if (allowed.empty()) {
      output.clear();  // the text is complete: start another
    } else {
      output.push_back(allowed[rng() % allowed.size()]);
    }
  }
}

}  // namespace blossom
