// The OpenAI stream encoder: chunks, usage and [DONE], and streamed echo against the unary
// response.
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "clients/gateway/openai_api.h"
#include "clients/gateway/openai_test_util.h"
#include "gtest/gtest.h"

namespace blossom::gateway::openai {
namespace {

using test_responses::MakeEchoResponse;

// The streamed choice's chunks, joined: the text and the four logprobs lists.
Json JoinStreamedChoice(const std::string& events) {
  Json joined = {{"text", ""},
                 {"tokens", Json::array()},
                 {"token_logprobs", Json::array()},
                 {"top_logprobs", Json::array()},
                 {"text_offset", Json::array()},
                 {"finish_reason", nullptr}};
  for (absl::string_view e : absl::StrSplit(events, "\n\n", absl::SkipEmpty())) {
    if (e == "data: [DONE]") continue;
    const Json chunk = Json::parse(e.substr(6));
    const Json& choice = chunk["choices"][0];
    joined["text"] = joined["text"].get<std::string>() + choice["text"].get<std::string>();
    if (!choice["finish_reason"].is_null()) joined["finish_reason"] = choice["finish_reason"];
    if (choice["logprobs"].is_null()) continue;
    for (const char* list : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
      for (const Json& v : choice["logprobs"][list]) joined[list].push_back(v);
    }
  }
  return joined;
}

// echo on a stream (vLLM): the prompt's text and logprobs lead the first chunk, and the joined
// chunks equal the unary response; with max_tokens 0 only the prompt is sent.
TEST(OpenAIApiTest, StreamedEchoEqualsTheUnaryResponse) {
  const blossom::v1::GenerateResponse response = MakeEchoResponse();
  for (const char* body : {R"({"prompt":"Say","echo":true,"logprobs":1,"stream":true})",
                           R"({"prompt":[5,6],"echo":true,"logprobs":1,"stream":true})",
                           R"({"prompt":"Say","echo":true,"stream":true})",
                           R"({"prompt":[5,6],"echo":true,"logprobs":0,"max_tokens":0,"stream":true})"}) {
    SCOPED_TRACE(body);
    auto r = ParseCompletionRequest(body);
    ASSERT_TRUE(r.ok()) << r.status();
    const Json unary = CompletionResponse(*r, response, "c", 1)["choices"][0];
    // The same generation as stream messages: prompt logprobs with the first token.
    StreamEncoder encoder(*r, "c", 1);
    std::string events;
    for (int i = 0; i < response.tokens_size(); ++i) {
      blossom::v1::GenerateStreamResponse m;
      *m.mutable_token() = response.tokens(i);
      m.set_text_delta(response.tokens(i).text());
      if (i == 0 && r->request.sampling().has_prompt_logprobs()) {
        *m.mutable_prompt_logprobs() = response.prompt_logprobs();
      }
      if (i + 1 == response.tokens_size()) *m.mutable_final() = response.final();
      events += encoder.OnMessage(m);
    }
    const Json joined = JoinStreamedChoice(events);
    EXPECT_EQ(joined["text"], unary["text"]);
    EXPECT_EQ(joined["finish_reason"], unary["finish_reason"]);
    if (unary["logprobs"].is_null()) {
      EXPECT_TRUE(joined["tokens"].empty());
    } else {
      for (const char* list : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
        EXPECT_EQ(joined[list], unary["logprobs"][list]) << list;
      }
    }
  }
}

TEST(OpenAIApiTest, StreamEncoderEmitsChunksUsageAndDone) {
  auto r = ParseChatRequest(
      R"({"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_TRUE(r.ok());
  StreamEncoder encoder(*r, "chatcmpl-1", 1);
  std::string out = encoder.Start();
  blossom::v1::GenerateStreamResponse m1;
  m1.set_text_delta("Hel");
  out += encoder.OnMessage(m1);
  blossom::v1::GenerateStreamResponse m2;
  m2.set_text_delta("lo");
  m2.mutable_final()->set_finish_reason(blossom::v1::FINISH_REASON_STOP_STRING);
  m2.mutable_final()->mutable_usage()->set_prompt_tokens(1);
  m2.mutable_final()->mutable_usage()->set_generated_tokens(2);
  m2.mutable_final()->set_system_fingerprint("blossom-0.1.0-float32");
  out += encoder.OnMessage(m2);
  std::vector<std::string> events;
  for (absl::string_view e : absl::StrSplit(out, "\n\n", absl::SkipEmpty())) events.emplace_back(e);
  ASSERT_EQ(events.size(), 5u) << out;
  Json first = Json::parse(events[0].substr(6));
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(Json::parse(events[1].substr(6))["choices"][0]["delta"]["content"], "Hel");
  EXPECT_FALSE(Json::parse(events[1].substr(6)).contains("system_fingerprint"));
  Json last = Json::parse(events[2].substr(6));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["system_fingerprint"], "blossom-0.1.0-float32");
  EXPECT_TRUE(last["usage"].is_null());
  Json usage = Json::parse(events[3].substr(6));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 3);
  EXPECT_EQ(events[4], "data: [DONE]");
}

}  // namespace
}  // namespace blossom::gateway::openai
