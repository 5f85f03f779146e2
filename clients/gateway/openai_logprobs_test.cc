// OpenAI's logprob maps as clients receive them (serialized): vLLM's order, not alphabetical.
// completions' top_logprobs hold the token first, then its alternatives most likely first;
// vLLM's prompt_logprobs the prompt token first, then its alternatives by rank.
#include <string>

#include "absl/strings/match.h"
#include "clients/gateway/json_fields.h"
#include "clients/gateway/openai_api.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace blossom::gateway::openai {
namespace {

// One generated token "b", ranked third after "c" and "a" (the server's list, most likely
// first, holds "b" too): alphabetical order would put "a" first.
blossom::v1::GenerateResponse Ranked() {
  blossom::v1::GenerateResponse response;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(text: "b"
           tokens { id: 2 text: "b" logprob: -2
                    top_logprobs { token_id: 3 token: "c" logprob: -0.25 }
                    top_logprobs { token_id: 1 token: "a" logprob: -0.5 }
                    top_logprobs { token_id: 2 token: "b" logprob: -2 } }
           final { finish_reason: FINISH_REASON_LENGTH
                   usage { prompt_tokens: 1 generated_tokens: 1 } })pb",
      &response));
  return response;
}

TEST(OpenAILogprobsTest, TopLogprobsAreTheTokenThenByProbability) {
  auto r = ParseCompletionRequest(R"({"prompt":"x","logprobs":3})");
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string body = Dump(CompletionResponse(*r, Ranked(), "cmpl-1", 1));
  EXPECT_TRUE(absl::StrContains(body, R"("top_logprobs":[{"b":-2.0,"c":-0.25,"a":-0.5}])"))
      << body;
  // logprobs 1: the token and the most likely alternative (OpenAI's "up to logprobs+1").
  auto one = ParseCompletionRequest(R"({"prompt":"x","logprobs":1})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(absl::StrContains(Dump(CompletionResponse(*one, Ranked(), "cmpl-2", 1)),
                                R"("top_logprobs":[{"b":-2.0,"c":-0.25}])"));

  // Streamed chunks keep the order too.
  auto streamed = ParseCompletionRequest(R"({"prompt":"x","logprobs":3,"stream":true})");
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  StreamEncoder encoder(*streamed, "cmpl-3", 1);
  blossom::v1::GenerateStreamResponse m;
  *m.mutable_token() = Ranked().tokens(0);
  m.set_text_delta("b");
  const std::string events = encoder.OnMessage(m);
  EXPECT_TRUE(absl::StrContains(events, R"("top_logprobs":[{"b":-2.0,"c":-0.25,"a":-0.5}])"))
      << events;
}

// Two tokens that decode to the same text (byte tokens shown as U+FFFD): as vLLM's Python dict,
// the text keeps its first place (the chosen token's, first) and takes the later value (the
// other byte token's), which vLLM sends too.
TEST(OpenAILogprobsTest, ATextSeenAgainKeepsItsPlaceAndTakesTheLaterValue) {
  auto r = ParseCompletionRequest(R"({"prompt":"x","logprobs":3})");
  ASSERT_TRUE(r.ok()) << r.status();
  blossom::v1::GenerateResponse response;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(text: "\357\277\275"
           tokens { id: 10 text: "\357\277\275" logprob: -1
                    top_logprobs { token_id: 20 token: "x" logprob: -0.5 }
                    top_logprobs { token_id: 10 token: "\357\277\275" logprob: -1 }
                    top_logprobs { token_id: 11 token: "\357\277\275" logprob: -1.5 } })pb",
      &response));
  const std::string body = Dump(CompletionResponse(*r, response, "cmpl-1", 1));
  EXPECT_TRUE(absl::StrContains(body, "\"top_logprobs\":[{\"\xEF\xBF\xBD\":-1.5,\"x\":-0.5}]"))
      << body;
}

// vLLM's prompt_logprobs: the prompt token first, then its alternatives by rank (ids "12" and
// "7" after "6"; sorted keys would give "12", "6", "7").
TEST(OpenAILogprobsTest, PromptLogprobsAreTheTokenThenByRank) {
  auto r = ParseCompletionRequest(R"({"prompt":"Say","prompt_logprobs":2,"max_tokens":1})");
  ASSERT_TRUE(r.ok()) << r.status();
  blossom::v1::GenerateResponse response = Ranked();
  ASSERT_TRUE(google::protobuf::TextFormat::MergeFromString(
      R"pb(prompt_logprobs { id: 5 text: "S" }
           prompt_logprobs { id: 6 text: "ay" logprob: -3.5 rank: 4
                             top_logprobs { token_id: 12 token: "ee" logprob: -0.5 }
                             top_logprobs { token_id: 7 token: "oo" logprob: -1.5 } })pb",
      &response));
  const std::string body = Dump(CompletionResponse(*r, response, "cmpl-1", 1));
  EXPECT_TRUE(absl::StrContains(
      body, R"("prompt_logprobs":[null,{"6":{"logprob":-3.5,"rank":4,"decoded_token":"ay"},)"
            R"("12":{"logprob":-0.5,"rank":1,"decoded_token":"ee"},)"
            R"("7":{"logprob":-1.5,"rank":2,"decoded_token":"oo"}}])"))
      << body;
}

}  // namespace
}  // namespace blossom::gateway::openai
