// Function calling and structured output on the OpenAI routes: requests parsed into
// sampling.json_schema, tool_calls in unary and streamed answers, refusals naming the client's
// field. Split from openai_api_test.cc.
#include "clients/gateway/openai_api.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "server/status_details.h"

namespace blossom::gateway::openai {
namespace {

// A named tool_choice: the tools are rendered into the prompt and the call is generated under
// the function's parameters; the response answers it as tool_calls.
TEST(OpenAIApiTest, NamedToolChoiceIsAnsweredAsToolCalls) {
  auto chat = ParseChatRequest(
      R"({"messages":[{"role":"user","content":"Weather in Paris?"}],"n":2,)"
      R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":)"
      R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],)"
      R"("tool_choice":{"type":"function","function":{"name":"get_weather"}}})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->tool_choice.mode, ToolChoice::Mode::kNamed);
  ASSERT_EQ(chat->batch.size(), 2u);
  EXPECT_EQ(chat->batch[1].sampling().json_schema(),
            R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})");
  EXPECT_NE(chat->request.text().find(R"(Functions (JSON):)"), std::string::npos);
  EXPECT_NE(chat->request.text().find(R"("name":"get_weather")"), std::string::npos);
  std::vector<blossom::v1::GenerateResponse> responses(2);
  responses[0].set_text(R"({"city": "Paris"})");
  responses[0].mutable_final()->set_finish_reason(blossom::v1::FINISH_REASON_EOS_TOKEN);
  responses[1].set_text(R"({"city": "Pa)");  // cut short
  responses[1].mutable_final()->set_finish_reason(blossom::v1::FINISH_REASON_LENGTH);
  const Json body = CompletionResponse(*chat, responses, "chatcmpl-1", 0);
  const Json& first = body["choices"][0];
  EXPECT_TRUE(first["message"]["content"].is_null());
  EXPECT_EQ(first["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  // A named call's arguments are the text as generated.
  EXPECT_EQ(first["message"]["tool_calls"][0]["function"]["arguments"], R"({"city": "Paris"})");
  EXPECT_EQ(first["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][1]["message"]["content"], R"({"city": "Pa)");
  EXPECT_FALSE(body["choices"][1]["message"].contains("tool_calls"));
  EXPECT_EQ(body["choices"][1]["finish_reason"], "length");
}

// The server's refusal of a schema names the field the client wrote it in.
TEST(OpenAIApiTest, SchemaRefusalsNameTheClientsField) {
  const absl::Status refusal = WithReason(
      WithFieldViolation(absl::InvalidArgumentError(
                             "sampling.json_schema: json schema at /: 'minimum' is not supported"),
                         "sampling.json_schema",
                         "sampling.json_schema: json schema at /: 'minimum' is not supported"),
      "INVALID_SAMPLING_PARAMS");
  struct Case {
    std::string body;
    const char* param;
  };
  const Case cases[] = {
      {R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":)"
       R"({"name":"a"}},{"type":"function","function":{"name":"b","parameters":{"type":"object"}}}],)"
       R"("tool_choice":{"type":"function","function":{"name":"b"}}})",
       "tools[1].function.parameters"},
      {R"({"messages":[{"role":"user","content":"x"}],"structured_outputs":{"json":{}}})",
       "structured_outputs.json"},
      {R"({"messages":[{"role":"user","content":"x"}],"guided_json":{}})", "guided_json"},
      {R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}})",
       "response_format"},
  };
  for (const Case& c : cases) {
    auto r = ParseChatRequest(c.body);
    ASSERT_TRUE(r.ok()) << r.status();
    const absl::Status named = NameConstraintField(*r, refusal);
    EXPECT_EQ(named.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ParamOf(named), c.param) << c.body;
    EXPECT_EQ(named.message(),
              absl::StrCat(c.param, ": json schema at /: 'minimum' is not supported"));
    EXPECT_EQ(DetailsOf(named).reason, "INVALID_SAMPLING_PARAMS");
  }
  // Another field's refusal is left as it is.
  auto plain = ParseChatRequest(R"({"messages":[{"role":"user","content":"x"}],"guided_json":{}})");
  const absl::Status other = WithFieldViolation(absl::InvalidArgumentError("top_p"), "sampling.top_p", "x");
  EXPECT_EQ(ParamOf(NameConstraintField(*plain, other)), "sampling.top_p");
}

// Structured output reaches the server as sampling.json_schema, from either endpoint.
TEST(OpenAIApiTest, JsonSchemasFromResponseFormatAndGuidedJson) {
  auto chat = ParseChatRequest(R"({"messages":[{"role":"user","content":"hi"}],"n":2,)"
                               R"("response_format":{"type":"json_object"}})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_EQ(chat->batch.size(), 2u);
  for (const auto& request : chat->batch) {
    EXPECT_EQ(request.sampling().json_schema(), R"({"type":"object"})");
  }
  auto completion =
      ParseCompletionRequest(R"({"prompt":"a","guided_json":{"type":"array"},)"
                             R"("structured_outputs":{"disable_any_whitespace":true}})");
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_EQ(completion->request.sampling().json_schema(), R"({"type":"array"})");
  EXPECT_TRUE(completion->request.sampling().json_compact());
}

// Streamed calls: a named call's header (id, type, name) first, then its argument pieces; a
// required call list once whole, at the end.
TEST(OpenAIApiTest, StreamedToolCalls) {
  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])";
  for (const char* choice : {R"({"type":"function","function":{"name":"f"}})", R"("required")"}) {
    auto r = ParseChatRequest(absl::StrCat(R"({"messages":[{"role":"user","content":"x"}],)",
                                           R"("stream":true,)", tools, R"(,"tool_choice":)", choice,
                                           "}"));
    ASSERT_TRUE(r.ok()) << r.status();
    const bool named = r->tool_choice.mode == ToolChoice::Mode::kNamed;
    StreamEncoder encoder(*r, "chatcmpl-1", 1);
    std::string out = encoder.Start();
    const std::vector<std::string> pieces =
        named ? std::vector<std::string>{R"({"a")", R"(: 1})"}
              : std::vector<std::string>{R"([{"name": "f", )", R"("parameters": {"a": 1}}])"};
    for (size_t i = 0; i < pieces.size(); ++i) {
      blossom::v1::GenerateStreamResponse m;
      m.set_text_delta(pieces[i]);
      if (i + 1 == pieces.size()) {
        m.mutable_final()->set_finish_reason(blossom::v1::FINISH_REASON_EOS_TOKEN);
      }
      out += encoder.OnMessage(m);
    }
    std::vector<Json> deltas;
    std::string finish;
    for (absl::string_view e : absl::StrSplit(out, "\n\n", absl::SkipEmpty())) {
      if (e == "data: [DONE]") continue;
      const Json chunk = Json::parse(e.substr(6));
      deltas.push_back(chunk["choices"][0]["delta"]);
      if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
    }
    std::string arguments;
    int headers = 0;
    for (const Json& d : deltas) {
      if (!d.contains("tool_calls")) continue;
      for (const Json& call : d["tool_calls"]) {
        EXPECT_EQ(call["index"], 0);
        if (call.contains("id")) {
          ++headers;
          EXPECT_EQ(call["type"], "function");
          EXPECT_EQ(call["function"]["name"], "f");
        }
        arguments += call["function"]["arguments"].get<std::string>();
      }
    }
    EXPECT_EQ(headers, 1) << out;
    EXPECT_EQ(Json::parse(arguments), Json::parse(R"({"a": 1})")) << out;
    EXPECT_EQ(finish, named ? "stop" : "tool_calls") << out;
  }
}

}  // namespace
}  // namespace blossom::gateway::openai
