#include "clients/gateway/best_of.h"

#include <cmath>
#include <string>
#include <vector>

#include "clients/gateway/json_fields.h"
#include "clients/gateway/openai_api.h"
#include "clients/gateway/tgi_api.h"
#include "gtest/gtest.h"

namespace blossom::gateway {
namespace {

using blossom::v1::GenerateResponse;

GenerateResponse Candidate(const std::string& text, std::vector<float> logprobs) {
  GenerateResponse r;
  r.set_text(text);
  for (size_t i = 0; i < logprobs.size(); ++i) {
    blossom::v1::Token* t = r.add_tokens();
    t->set_id(static_cast<int32_t>(10 + i));
    t->set_text("x");
    t->set_logprob(logprobs[i]);
  }
  r.mutable_final()->mutable_usage()->set_prompt_tokens(3);
  r.mutable_final()->mutable_usage()->set_generated_tokens(static_cast<int32_t>(logprobs.size()));
  r.mutable_final()->set_finish_reason(blossom::v1::FINISH_REASON_LENGTH);
  return r;
}

TEST(BestOfTest, RanksByMeanTokenLogprob) {
  // The longer candidate has the lower sum but the higher mean: it wins (per token, as TGI).
  const std::vector<GenerateResponse> c = {Candidate("a", {-1.0f, -1.0f}),
                                           Candidate("b", {-0.5f, -0.5f, -0.5f, -0.5f}),
                                           Candidate("c", {-1.0f, -1.0f}), Candidate("d", {})};
  EXPECT_DOUBLE_EQ(MeanTokenLogprob(c[1]), -0.5);
  EXPECT_TRUE(std::isinf(MeanTokenLogprob(c[3])));
  EXPECT_EQ(RankByMeanLogprob(c, 0, 4), (std::vector<size_t>{1, 0, 2, 3}));  // equals keep order
  EXPECT_EQ(RankByMeanLogprob(c, 2, 2), (std::vector<size_t>{2, 3}));
}

// Chat asks only the first candidate for the prompt's logprobs; they are answered whichever
// candidate wins.
TEST(BestOfTest, ChatPromptLogprobsComeFromTheFirstCandidate) {
  auto parsed = openai::ParseChatRequest(
      R"({"messages": [{"role": "user", "content": "hi"}], "best_of": 2, "temperature": 1,
          "prompt_logprobs": 0})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->batch.size(), 2u);
  EXPECT_EQ(parsed->batch[0].sampling().prompt_logprobs(), 0);
  EXPECT_FALSE(parsed->batch[1].sampling().has_prompt_logprobs());
  std::vector<GenerateResponse> responses = {Candidate("worse", {-2.0f}),
                                             Candidate("better", {-0.5f})};
  blossom::v1::Token* first = responses[0].add_prompt_logprobs();
  first->set_id(4);
  first->set_text("hi");
  blossom::v1::Token* second = responses[0].add_prompt_logprobs();
  second->set_id(5);
  second->set_text("!");
  second->set_logprob(-1.5f);
  const Json body = openai::CompletionResponse(*parsed, responses, "chatcmpl-1", 0);
  EXPECT_EQ(body["choices"][0]["message"]["content"], "better");
  ASSERT_EQ(body["prompt_logprobs"].size(), 2u) << body.dump();
  EXPECT_TRUE(body["prompt_logprobs"][0].is_null());
  EXPECT_DOUBLE_EQ(body["prompt_logprobs"][1]["5"]["logprob"].get<double>(), -1.5);
}

TEST(BestOfTest, OpenAICompletionsReturnTheNBestOfEachPrompt) {
  auto parsed = openai::ParseCompletionRequest(
      R"({"prompt": ["p", "q"], "n": 2, "best_of": 3, "temperature": 0.8, "seed": 5})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->batch.size(), 6u);  // best_of per prompt
  EXPECT_EQ(parsed->batch[2].sampling().seed(), 7u);  // distinct draws
  EXPECT_EQ(parsed->batch[3].text(), "q");
  EXPECT_TRUE(parsed->batch[0].sampling().has_logprobs());  // to rank them
  const std::vector<GenerateResponse> responses = {
      Candidate("p0", {-2.0f}), Candidate("p1", {-0.5f}), Candidate("p2", {-1.0f}),
      Candidate("q0", {-0.1f}), Candidate("q1", {-3.0f}), Candidate("q2", {-0.2f})};
  const Json body = openai::CompletionResponse(*parsed, responses, "cmpl-1", 0);
  ASSERT_EQ(body["choices"].size(), 4u);
  std::vector<std::string> texts;
  for (const Json& choice : body["choices"]) texts.push_back(choice["text"].get<std::string>());
  EXPECT_EQ(texts, (std::vector<std::string>{"p1", "p2", "q0", "q2"}));
  EXPECT_EQ(body["choices"][3]["index"], 3);
  EXPECT_FALSE(body["choices"][0].contains("logprobs") && !body["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(body["usage"]["completion_tokens"], 4);  // the returned choices'
  EXPECT_EQ(body["usage"]["prompt_tokens"], 6);      // each prompt once

  auto refused = openai::ParseCompletionRequest(R"({"prompt": "p", "n": 3, "best_of": 2})");
  EXPECT_EQ(ParamOf(refused.status()), "best_of");
  refused = openai::ParseCompletionRequest(R"({"prompt": "p", "best_of": 2, "stream": true})");
  EXPECT_EQ(ParamOf(refused.status()), "best_of");
  refused = openai::ParseCompletionRequest(R"({"prompt": ["p", "q"], "best_of": 100})");
  EXPECT_EQ(ParamOf(refused.status()), "best_of");  // 200 candidates
  refused = openai::ParseCompletionRequest(
      R"({"prompt": "p", "best_of": 2, "use_beam_search": true})");
  EXPECT_EQ(ParamOf(refused.status()), "best_of");
  EXPECT_TRUE(openai::ParseCompletionRequest(R"({"prompt": "p", "n": 2, "best_of": 2})").ok());
}

TEST(BestOfTest, TgiReturnsTheBestWithTheOthersInDetails) {
  auto parsed = tgi::ParseGenerateRequest(
      R"({"inputs": "Hi", "parameters": {"best_of": 3, "do_sample": true, "details": true}})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->best_of, 3);
  EXPECT_TRUE(parsed->request.sampling().has_logprobs());
  const std::vector<GenerateResponse> candidates = {
      Candidate("a", {-2.0f}), Candidate("b", {-0.5f, -0.7f}), Candidate("c", {-1.0f})};
  const Json body = tgi::BestOfResponse(*parsed, candidates);
  EXPECT_EQ(body["generated_text"], "b");
  ASSERT_EQ(body["details"]["best_of_sequences"].size(), 2u);
  EXPECT_EQ(body["details"]["best_of_sequences"][0]["generated_text"], "a");
  EXPECT_EQ(body["details"]["best_of_sequences"][1]["generated_tokens"], 1);
  EXPECT_EQ(body["details"]["best_of_sequences"][1]["finish_reason"], "length");
  // Without details, the best text alone (as TGI).
  parsed->details = false;
  EXPECT_FALSE(tgi::BestOfResponse(*parsed, candidates).contains("details"));

  for (const char* body_text :
       {R"({"inputs": "Hi", "parameters": {"best_of": 2}})",                    // greedy
        R"({"inputs": "Hi", "parameters": {"best_of": 2, "do_sample": true, "seed": 1}})",
        R"({"inputs": "Hi", "parameters": {"best_of": 9, "do_sample": true}})"}) {
    auto refused = tgi::ParseGenerateRequest(body_text);
    EXPECT_FALSE(refused.ok()) << body_text;
  }
  auto seeded = tgi::ParseGenerateRequest(
      R"({"inputs": "Hi", "parameters": {"best_of": 2, "do_sample": true, "seed": 1}})");
  EXPECT_EQ(ParamOf(seeded.status()), "parameters.seed");
}

}  // namespace
}  // namespace blossom::gateway
