#include "benchmarks/subcommand_flags.h"

#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(SubcommandFlagsTest, SweepFlagsOnServeAreRefusedByName) {
  for (const char* name : {"batch_sizes", "threads", "cycles", "max_new_tokens", "ignore_eos",
                           "warmup", "tp", "backend", "prompt_tokens", "cuda_graphs",
                           "cuda_mma_attention"}) {
    const absl::Status s = CheckSubcommandFlags("serve", {"target", name});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
    std::string dashed = name;
    for (char& c : dashed) c = c == '_' ? '-' : c;
    EXPECT_NE(s.message().find("--" + dashed + " applies to `blossom-bench sweep` only"),
              std::string::npos)
        << s;
  }
}

TEST(SubcommandFlagsTest, ServeFlagsOnSweepAreRefusedByName) {
  for (const char* name : {"target", "burstiness", "request_rate", "seed", "request_timeout",
                           "slo_ttft_ms", "corpus"}) {
    const absl::Status s = CheckSubcommandFlags("sweep", {"model", name});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(s.message().find("applies to `blossom-bench serve` only"), std::string::npos) << s;
  }
  EXPECT_NE(CheckSubcommandFlags("sweep", {"request_rate"}).message().find("--request-rate"),
            std::string::npos);
}

TEST(SubcommandFlagsTest, SharedAndOwnFlagsPass) {
  EXPECT_TRUE(CheckSubcommandFlags("serve", {"model", "json", "svg_prefix", "markdown", "commit",
                                             "machine", "target", "burstiness"})
                  .ok());
  EXPECT_TRUE(CheckSubcommandFlags("sweep", {"model", "json", "batch_sizes", "cuda_graphs",
                                             "threads", "commit"})
                  .ok());
  EXPECT_TRUE(CheckSubcommandFlags("other", {"target", "batch_sizes"}).ok());
  EXPECT_FALSE(IsSweepOnlyFlag("model"));
  EXPECT_FALSE(IsServeOnlyFlag("model"));
}

}  // namespace
}  // namespace blossom
