#include "server/startup_limits.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(StartupLimitsTest, TheDefaultsAreAccepted) {
  EXPECT_TRUE(CheckStartupLimits(StartupLimits{}).ok());
  StartupLimits edges;
  edges.port = 0;
  edges.max_message_bytes = kMinMessageBytes;
  edges.drain_timeout_s = 0;
  edges.max_total_tokens = 2;
  edges.max_input_tokens = 1;
  edges.speculative_max_running = 0;
  EXPECT_TRUE(CheckStartupLimits(edges).ok());
}

// Each value no request could be served with is refused, naming its flag.
TEST(StartupLimitsTest, ImpossibleValuesNameTheirFlag) {
  struct Case {
    std::function<void(StartupLimits&)> set;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](StartupLimits& l) { l.port = 70000; }, "--port must be in [0, 65535]"},
      {[](StartupLimits& l) { l.port = -1; }, "--port must be in [0, 65535]"},
      {[](StartupLimits& l) { l.max_message_bytes = 0; }, "--max_message_bytes must be >= 1024"},
      {[](StartupLimits& l) { l.drain_timeout_s = -1; }, "--drain_timeout must be a finite"},
      {[](StartupLimits& l) { l.drain_timeout_s = INFINITY; }, "--drain_timeout must be a finite"},
      {[](StartupLimits& l) { l.drain_timeout_s = NAN; }, "--drain_timeout must be a finite"},
      {[](StartupLimits& l) { l.max_total_tokens = -1; }, "--max_total_tokens must be 0"},
      {[](StartupLimits& l) { l.max_total_tokens = 1; }, "--max_total_tokens must be 0"},
      {[](StartupLimits& l) { l.max_input_tokens = -1; }, "--max_input_tokens must be >= 1"},
      {[](StartupLimits& l) {
         l.max_input_tokens = 2048;
         l.max_total_tokens = 2048;
       },
       "must be less than --max_total_tokens"},
      {[](StartupLimits& l) { l.speculative_max_running = -1; },
       "--speculative_max_running must be >= 0"},
      {[](StartupLimits& l) { l.max_prompt_logprob_rows = 0; },
       "--max_prompt_logprob_rows must be >= 1"},
      {[](StartupLimits& l) { l.max_waiting_requests = 0; }, "--max_waiting_requests must be >= 1"},
      {[](StartupLimits& l) { l.max_batch_size = 0; }, "--max_batch_size must be >= 1"},
      {[](StartupLimits& l) { l.max_batched_tokens = 0; }, "--max_batched_tokens must be >= 1"},
      {[](StartupLimits& l) { l.block_size = 0; }, "--block_size must be >= 1"},
  };
  for (const Case& c : cases) {
    StartupLimits limits;
    c.set(limits);
    const absl::Status s = CheckStartupLimits(limits);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s;
  }
}

TEST(StartupLimitsTest, TokenCapsResolveTheirDefaults) {
  EXPECT_EQ(ResolveMaxTotalTokens(0), kDefaultMaxTotalTokens);
  EXPECT_EQ(ResolveMaxTotalTokens(4096), 4096);
  EXPECT_EQ(ResolveMaxInputTokens(0, 2048), 2047);     // the default: room for one token
  EXPECT_EQ(ResolveMaxInputTokens(5000, 2048), 2047);  // a given one past the cap is lowered
  EXPECT_EQ(ResolveMaxInputTokens(100, 2048), 100);
  EXPECT_EQ(ResolveMaxInputTokens(0, 1), 1);
}

}  // namespace
}  // namespace blossom
