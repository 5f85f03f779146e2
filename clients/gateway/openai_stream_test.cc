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
  EXPECT_LT(events[2].find("\"system_fingerprint\""), events[2].find("\"choices\""))
      << "OpenAI's place for it, after model: " << events[2];
  EXPECT_TRUE(last["usage"].is_null());
  Json usage = Json::parse(events[3].substr(6));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 3);
  EXPECT_EQ(events[4], "data: [DONE]");
}

// The usage of each chunk of `events` (null where it has none), and the events' count.
std::vector<Json> ChunkUsages(const std::string& events) {
  std::vector<Json> usages;
  for (absl::string_view e : absl::StrSplit(events, "\n\n", absl::SkipEmpty())) {
    if (e == "data: [DONE]") continue;
    usages.push_back(Json::parse(e.substr(6)).value("usage", Json()));
  }
  return usages;
}

Json Usage(int prompt, int completion) {
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

// vLLM's continuous_usage_stats: with include_usage every chunk carries its own choice's usage
// so far (the role chunk's completion 0); the last chunk still sums the request.
TEST(OpenAIApiTest, ContinuousUsageStatsOnEveryChunk) {
  auto r = ParseChatRequest(
      R"({"messages":[{"role":"user","content":"x"}],"n":2,"stream":true,)"
      R"("stream_options":{"include_usage":true,"continuous_usage_stats":true}})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->continuous_usage);
  StreamEncoder encoder(*r, "chatcmpl-1", 1);
  for (int k = 0; k < 2; ++k) encoder.SetPromptTokens(k, 4);
  std::string out = encoder.Start();
  for (int k = 0; k < 2; ++k) {
    blossom::v1::GenerateStreamResponse m;
    m.set_text_delta("Hel");
    m.mutable_token()->set_text("Hel");
    out += encoder.OnMessage(m, k);
  }
  for (int k = 0; k < 2; ++k) {
    blossom::v1::GenerateStreamResponse last;
    last.set_text_delta("lo");
    last.mutable_token()->set_text("lo");
    last.mutable_final()->mutable_usage()->set_prompt_tokens(4);
    last.mutable_final()->mutable_usage()->set_generated_tokens(2);
    out += encoder.OnMessage(last, k);
  }
  EXPECT_EQ(ChunkUsages(out), (std::vector<Json>{Usage(4, 0), Usage(4, 0), Usage(4, 1),
                                                 Usage(4, 1), Usage(4, 2), Usage(4, 2),
                                                 Json{{"prompt_tokens", 4},
                                                      {"completion_tokens", 4},
                                                      {"total_tokens", 8},
                                                      {"prompt_tokens_details",
                                                       {{"cached_tokens", 0}}}}}))
      << out;

  // Completions: the prompt as the server keeps it (truncate_prompt_tokens).
  auto cut = ParseCompletionRequest(
      R"({"prompt":"long","truncate_prompt_tokens":3,"stream":true,)"
      R"("stream_options":{"include_usage":true,"continuous_usage_stats":true}})");
  ASSERT_TRUE(cut.ok()) << cut.status();
  StreamEncoder completion(*cut, "cmpl-1", 1);
  completion.SetPromptTokens(0, 10);
  blossom::v1::GenerateStreamResponse m;
  m.set_text_delta("a");
  m.mutable_token()->set_text("a");
  EXPECT_EQ(ChunkUsages(completion.OnMessage(m)), std::vector<Json>{Usage(3, 1)});
}

// continuous_usage_stats does nothing without include_usage (vLLM), and must be a boolean.
TEST(OpenAIApiTest, ContinuousUsageStatsNeedsIncludeUsage) {
  auto alone = ParseCompletionRequest(
      R"({"prompt":"a","stream":true,"stream_options":{"continuous_usage_stats":true}})");
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_FALSE(alone->continuous_usage);
  EXPECT_FALSE(alone->include_usage);
  auto bad = ParseCompletionRequest(
      R"({"prompt":"a","stream":true,"stream_options":{"continuous_usage_stats":"yes"}})");
  EXPECT_EQ(ParamOf(bad.status()), "stream_options.continuous_usage_stats");
  // Without it, chunks keep "usage": null until the totals.
  auto plain = ParseCompletionRequest(
      R"({"prompt":"a","stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_TRUE(plain.ok()) << plain.status();
  StreamEncoder encoder(*plain, "cmpl-1", 1);
  blossom::v1::GenerateStreamResponse m;
  m.set_text_delta("a");
  m.mutable_token()->set_text("a");
  EXPECT_EQ(ChunkUsages(encoder.OnMessage(m)), std::vector<Json>{Json()});
}

}  // namespace
}  // namespace blossom::gateway::openai
