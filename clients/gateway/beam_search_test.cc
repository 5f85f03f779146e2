#include "clients/gateway/beam_search.h"

#include <string>
#include <vector>

#include "clients/gateway/json_fields.h"
#include "gtest/gtest.h"

namespace blossom::gateway::openai {
namespace {

CompletionRequest Completion(const std::string& body) {
  auto parsed = ParseCompletionRequest(body);
  EXPECT_TRUE(parsed.ok()) << body << ": " << parsed.status();
  return parsed.ok() ? *parsed : CompletionRequest{};
}

// The field a refusal names (a 400-class INVALID_ARGUMENT), on completions or chat.
std::string Refused(const std::string& body, bool chat = false) {
  auto parsed = chat ? ParseChatRequest(body) : ParseCompletionRequest(body);
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << body;
  return ParamOf(parsed.status());
}

TEST(OpenAIBeamSearchTest, NIsTheBeamWidthAndEveryBeamAChoice) {
  const CompletionRequest r = Completion(
      R"({"prompt": ["a", "b"], "n": 3, "use_beam_search": true, "max_tokens": 5,
          "length_penalty": 0.5, "early_stopping": "never", "logprobs": 0,
          "stop_token_ids": [7], "min_tokens": 2, "ignore_eos": true})");
  ASSERT_TRUE(r.beam_search);
  EXPECT_EQ(r.beam.beam_width(), 3);
  EXPECT_FALSE(r.beam.has_num_return_sequences());  // the server's default: every beam
  EXPECT_EQ(r.beam.length_penalty(), 0.5);
  EXPECT_EQ(r.beam.early_stopping(), blossom::v1::EARLY_STOPPING_NEVER);
  EXPECT_TRUE(r.beam.logprobs());
  const std::vector<blossom::v1::BeamSearchRequest> calls = BeamSearchCalls(r);
  ASSERT_EQ(calls.size(), 2u);  // one per prompt, not per choice
  EXPECT_EQ(calls[0].text(), "a");
  EXPECT_EQ(calls[1].text(), "b");
  for (const auto& call : calls) {
    EXPECT_EQ(call.beam_width(), 3);
    EXPECT_EQ(call.stopping().max_new_tokens(), 5);
    EXPECT_EQ(call.stopping().min_new_tokens(), 2);
    EXPECT_TRUE(call.stopping().ignore_eos());
    EXPECT_EQ(call.stopping().stop_token_ids_size(), 1);
  }
  const CompletionRequest one = Completion(
      R"({"prompt": [5, 6], "use_beam_search": true, "early_stopping": true})");
  EXPECT_EQ(one.beam.beam_width(), 1);
  EXPECT_EQ(one.beam.early_stopping(), blossom::v1::EARLY_STOPPING_WHEN_FULL);
  EXPECT_FALSE(one.beam.has_length_penalty());
  ASSERT_EQ(BeamSearchCalls(one).size(), 1u);
  EXPECT_EQ(BeamSearchCalls(one)[0].token_ids().ids_size(), 2);
  // vLLM's clients send use_beam_search: false by default.
  EXPECT_FALSE(Completion(R"({"prompt": "a", "use_beam_search": false})").beam_search);
  // Chat: the rendered prompt, the no-op sampling values accepted.
  auto chat = ParseChatRequest(
      R"({"messages": [{"role": "user", "content": "hi"}], "n": 2, "use_beam_search": true,
          "temperature": 0, "top_p": 1, "seed": 4})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_TRUE(chat->beam_search);
  ASSERT_EQ(BeamSearchCalls(*chat).size(), 1u);
  EXPECT_FALSE(BeamSearchCalls(*chat)[0].text().empty());
}

// The searches of a request run at once: each call carries prompts x n, so the server refuses
// for good (a 400 on n) a request its waiting queue could never hold, not with a 429 a retry
// meets again.
TEST(OpenAIBeamSearchTest, EveryCallCarriesTheRequestsBeamsAsItsGroup) {
  const CompletionRequest three = Completion(
      R"({"prompt": ["a", "b", "c"], "n": 4, "use_beam_search": true, "max_tokens": 2})");
  const std::vector<blossom::v1::BeamSearchRequest> calls = BeamSearchCalls(three);
  ASSERT_EQ(calls.size(), 3u);
  for (const auto& call : calls) EXPECT_EQ(call.group_size(), 12) << call.text();
  // One prompt: its own beams (never below beam_width, which the server refuses).
  const CompletionRequest one =
      Completion(R"({"prompt": "a", "n": 3, "use_beam_search": true})");
  ASSERT_EQ(BeamSearchCalls(one).size(), 1u);
  EXPECT_EQ(BeamSearchCalls(one)[0].group_size(), 3);
  const CompletionRequest width_one = Completion(R"({"prompt": [5, 6], "use_beam_search": true})");
  EXPECT_EQ(BeamSearchCalls(width_one)[0].group_size(), 1);
}

TEST(OpenAIBeamSearchTest, WhatBeamSearchCannotTakeIsRefusedByName) {
  const std::string beam = R"("prompt": "a", "use_beam_search": true)";
  auto with = [&](const std::string& extra) { return "{" + beam + ", " + extra + "}"; };
  EXPECT_EQ(Refused(with(R"("stream": true)")), "stream");
  EXPECT_EQ(Refused(with(R"("n": 11)")), "n");
  EXPECT_EQ(Refused(with(R"("temperature": 0.7)")), "temperature");
  EXPECT_EQ(Refused(with(R"("top_p": 0.9)")), "top_p");
  EXPECT_EQ(Refused(with(R"("top_k": 5)")), "top_k");
  EXPECT_EQ(Refused(with(R"("min_p": 0.1)")), "min_p");
  EXPECT_EQ(Refused(with(R"("repetition_penalty": 1.2)")), "repetition_penalty");
  EXPECT_EQ(Refused(with(R"("frequency_penalty": 0.5)")), "frequency_penalty");
  EXPECT_EQ(Refused(with(R"("presence_penalty": 0.5)")), "presence_penalty");
  EXPECT_EQ(Refused(with(R"("logit_bias": {"5": 3})")), "logit_bias");
  EXPECT_EQ(Refused(with(R"("allowed_token_ids": [5, 6])")), "allowed_token_ids");
  EXPECT_EQ(Refused(with(R"("bad_words": ["x"])")), "bad_words");
  EXPECT_EQ(Refused(with(R"("guided_choice": ["x", "y"])")), "guided_choice");
  EXPECT_EQ(Refused(with(R"("guided_regex": "[a-z]+")")), "guided_regex");
  EXPECT_EQ(Refused(with(R"("stop": ["."])")), "stop");
  EXPECT_EQ(Refused(with(R"("echo": true)")), "echo");
  EXPECT_EQ(Refused(with(R"("prompt_logprobs": 1)")), "prompt_logprobs");
  EXPECT_EQ(Refused(with(R"("logprobs": 2)")), "logprobs");
  EXPECT_EQ(Refused(with(R"("early_stopping": "sometimes")")), "early_stopping");
  EXPECT_EQ(Refused(with(R"("length_penalty": "long")")), "length_penalty");
  // Beam fields without beam search would be ignored: refused instead.
  EXPECT_EQ(Refused(R"({"prompt": "a", "length_penalty": 2})"), "length_penalty");
  EXPECT_EQ(Refused(R"({"prompt": "a", "early_stopping": true})"), "early_stopping");
  // Chat: top_logprobs and tools.
  const std::string chat = R"("messages": [{"role": "user", "content": "hi"}], "use_beam_search": true)";
  EXPECT_EQ(Refused("{" + chat + R"(, "logprobs": true, "top_logprobs": 2})", true), "top_logprobs");
  EXPECT_EQ(Refused("{" + chat + R"(, "response_format": {"type": "json_object"}})", true),
            "response_format");
  EXPECT_EQ(Refused("{" + chat + R"(, "tools": [{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object"}}}], "tool_choice": "required"})", true),
            "tools");
}

TEST(OpenAIBeamSearchTest, BeamsBecomeChoicesBestFirst) {
  blossom::v1::BeamSearchResponse response;
  response.mutable_usage()->set_prompt_tokens(4);
  response.mutable_usage()->set_cached_prompt_tokens(3);
  response.set_request_id("r1");
  for (int i = 0; i < 2; ++i) {
    blossom::v1::Beam* beam = response.add_beams();
    beam->set_text(i == 0 ? "best" : "second");
    beam->add_tokens()->set_id(10 + i);
    beam->add_tokens()->set_id(20 + i);
    beam->set_finish_reason(i == 0 ? blossom::v1::FINISH_REASON_EOS_TOKEN
                                   : blossom::v1::FINISH_REASON_LENGTH);
  }
  const auto choices = BeamsAsChoices(response);
  ASSERT_EQ(choices.size(), 2u);
  EXPECT_EQ(choices[0].text(), "best");
  EXPECT_EQ(choices[1].tokens(1).id(), 21);
  EXPECT_EQ(choices[0].final().finish_reason(), blossom::v1::FINISH_REASON_EOS_TOKEN);
  EXPECT_EQ(choices[1].final().usage().generated_tokens(), 2);
  EXPECT_EQ(choices[1].final().usage().prompt_tokens(), 4);
  EXPECT_EQ(choices[1].final().usage().cached_prompt_tokens(), 3);  // prompt_tokens_details
  EXPECT_EQ(choices[0].final().request_id(), "r1");
}

}  // namespace
}  // namespace blossom::gateway::openai
