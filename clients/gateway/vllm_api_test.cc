// vLLM's /tokenize and /detokenize bodies: which /tokenize bodies are vLLM's, the prompt and chat
// forms, the response shapes, and refusals naming the field.
#include "clients/gateway/vllm_api.h"

#include <string>

#include "gtest/gtest.h"

namespace blossom::gateway::vllm {
namespace {

TEST(VllmApiTest, TellsVllmTokenizeBodiesFromTgis) {
  EXPECT_TRUE(IsTokenizeRequest(Json::parse(R"({"prompt":"hi"})")));
  EXPECT_TRUE(IsTokenizeRequest(Json::parse(R"({"model":"m","messages":[]})")));
  EXPECT_FALSE(IsTokenizeRequest(Json::parse(R"({"inputs":"hi"})")));
  EXPECT_FALSE(IsTokenizeRequest(Json::parse(R"({"inputs":"hi","prompt":"x"})")));
  EXPECT_FALSE(IsTokenizeRequest(Json::parse(R"({})")));
}

TEST(VllmApiTest, PromptAndChatTokenizeRequests) {
  auto prompt = ParseTokenizeRequest(Json::parse(R"({"model":"m","prompt":"The server"})"), {});
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(prompt->request.text(), "The server");
  EXPECT_EQ(prompt->request.model(), "m");  // the server checks it
  EXPECT_FALSE(prompt->return_token_strs);
  const Json messages = Json::parse(R"([{"role":"user","content":"Hello"}])");
  auto chat = ParseTokenizeRequest(
      Json{{"messages", messages}, {"return_token_strs", true}}, {});
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->request.text(), *RenderChatPrompt(messages, {}, {}));
  EXPECT_TRUE(chat->return_token_strs);
  EXPECT_TRUE(chat->chat);
  EXPECT_FALSE(prompt->chat);
  auto no_cue = ParseTokenizeRequest(Json{{"messages", messages}, {"add_generation_prompt", false}},
                                     {});
  ASSERT_TRUE(no_cue.ok()) << no_cue.status();
  ChatRenderOptions plain;
  plain.add_generation_prompt = false;
  EXPECT_EQ(no_cue->request.text(), *RenderChatPrompt(messages, {}, plain));

  struct Bad {
    const char* body;
    const char* field;
  };
  for (const Bad& bad : {Bad{R"({"prompt":5})", "prompt"},
                         Bad{R"({"prompt":"a","messages":[{"role":"user","content":"b"}]})",
                             "prompt"},
                         Bad{R"({"messages":"hi"})", "messages"},
                         Bad{R"({"prompt":"a","return_token_strs":"yes"})", "return_token_strs"},
                         Bad{R"({"messages":[{"role":"user","content":"b"}],)"
                             R"("add_generation_prompt":true,"continue_final_message":true})",
                             "continue_final_message"}}) {
    absl::StatusOr<TokenizeCall> call = ParseTokenizeRequest(Json::parse(bad.body), {});
    EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument) << bad.body;
    EXPECT_EQ(ParamOf(call.status()), bad.field) << bad.body << ": " << call.status();
  }
}

TEST(VllmApiTest, TokenizeResponseShape) {
  blossom::v1::TokenizeResponse response;
  response.add_ids(5);
  response.add_ids(9);
  response.add_tokens("The");
  response.add_tokens("Ġserver");
  response.set_max_total_tokens(2048);
  TokenizeCall call;
  EXPECT_EQ(TokenizeResponse(call, response),
            Json::parse(R"({"count":2,"max_model_len":2048,"tokens":[5,9],"token_strs":null})"));
  call.return_token_strs = true;
  EXPECT_EQ(TokenizeResponse(call, response)["token_strs"], Json::parse(R"(["The","Ġserver"])"));
}

TEST(VllmApiTest, Detokenize) {
  auto request = ParseDetokenizeRequest(R"({"model":"m","tokens":[5,9,0]})");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->ids_size(), 3);
  EXPECT_EQ(request->ids(2), 0);
  EXPECT_EQ(request->model(), "m");
  EXPECT_FALSE(request->skip_special_tokens()) << "vLLM keeps special tokens";
  for (const char* bad : {R"({})", R"({"tokens":"5"})", R"({"tokens":[1,-1]})",
                          R"({"tokens":[1.5]})", R"({"tokens":[4294967296]})"}) {
    absl::StatusOr<blossom::v1::DetokenizeRequest> parsed = ParseDetokenizeRequest(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(ParamOf(parsed.status()), "tokens") << bad;
  }
  blossom::v1::DetokenizeResponse response;
  response.set_text("The server");
  EXPECT_EQ(DetokenizeResponse(response), Json::parse(R"({"prompt":"The server"})"));
}

}  // namespace
}  // namespace blossom::gateway::vllm
