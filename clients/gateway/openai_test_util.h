// Responses the OpenAI encoders' tests share (openai_api_test, openai_stream_test).
#ifndef BLOSSOM_CLIENTS_GATEWAY_OPENAI_TEST_UTIL_H_
#define BLOSSOM_CLIENTS_GATEWAY_OPENAI_TEST_UTIL_H_

#include <tuple>

#include "proto/blossom/v1/blossom.pb.h"

namespace blossom::gateway::openai::test_responses {

// "Hi there" in two tokens with logprobs and one alternative each; 3 prompt tokens; finished by
// length.
inline blossom::v1::GenerateResponse MakeResponse() {
  blossom::v1::GenerateResponse response;
  response.set_text("Hi there");
  for (auto [id, text, lp] : {std::tuple{5, "Hi", -0.5f}, std::tuple{6, " there", -1.0f}}) {
    auto* t = response.add_tokens();
    t->set_id(id);
    t->set_text(text);
    t->set_logprob(lp);
    auto* top = t->add_top_logprobs();
    top->set_token(text);
    top->set_logprob(lp);
  }
  response.mutable_final()->set_finish_reason(blossom::v1::FINISH_REASON_LENGTH);
  response.mutable_final()->mutable_usage()->set_prompt_tokens(3);
  response.mutable_final()->mutable_usage()->set_generated_tokens(2);
  response.mutable_final()->set_system_fingerprint("blossom-0.1.0-float32");
  return response;
}

// MakeResponse for the two-token prompt "Say" (ids 5, 6), scored: the first token without a
// logprob, the second with one alternative.
inline blossom::v1::GenerateResponse MakeEchoResponse() {
  blossom::v1::GenerateResponse response = MakeResponse();
  auto* first = response.add_prompt_logprobs();
  first->set_id(5);
  first->set_text("S");
  auto* second = response.add_prompt_logprobs();
  second->set_id(6);
  second->set_text("ay");
  second->set_logprob(-3.5f);
  auto* alternative = second->add_top_logprobs();
  alternative->set_token_id(7);
  alternative->set_token("ee");
  alternative->set_logprob(-0.5f);
  return response;
}

}  // namespace blossom::gateway::openai::test_responses

#endif  // BLOSSOM_CLIENTS_GATEWAY_OPENAI_TEST_UTIL_H_
