#include "clients/gateway/chat_template.h"

#include <cstdio>
#include <fstream>

#include "gtest/gtest.h"

namespace blossom::gateway {
namespace {

Json Messages(absl::string_view json) { return Json::parse(std::string(json)); }

constexpr char kConversation[] = R"([
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": "Hi"},
  {"role": "assistant", "content": "Hello!"},
  {"role": "developer", "content": [{"type": "text", "text": "No jokes."}]},
  {"role": "user", "content": "How are you?"}])";

TEST(ChatTemplateTest, DefaultIsTheGatewaysFixedLayout) {
  auto prompt = RenderChatPrompt(Messages(kConversation), ChatTemplate());
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(*prompt,
            "Be brief.\nNo jokes.\n\nUser: Hi\nAssistant: Hello!\nUser: How are you?\nAssistant:");
  // No system text: no system block at all.
  auto plain = RenderChatPrompt(Messages(R"([{"role":"user","content":"x"}])"), ChatTemplate());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, "User: x\nAssistant:");
}

// A message's text parts are joined by "\n", as vLLM joins them (not run together).
TEST(ChatTemplateTest, TextPartsAreJoinedByNewlines) {
  auto prompt = RenderChatPrompt(
      Messages(R"([{"role":"user","content":[{"type":"text","text":"Hi"},)"
               R"({"type":"text","text":"there"}]}])"),
      ChatTemplate());
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(*prompt, "User: Hi\nthere\nAssistant:");
}

// Function calling: the tools' specs end the system block; an assistant's tool_calls follow
// its content in the generated form; tool results have their own role.
TEST(ChatTemplateTest, ToolsCallsAndResults) {
  ChatRenderOptions options;
  options.tools = {R"({"name":"get_weather"})", R"({"name":"now"})"};
  auto prompt = RenderChatPrompt(Messages(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"}])"),
                                 ChatTemplate(), options);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(*prompt,
            "Be brief.\nFunctions (JSON):\n{\"name\":\"get_weather\"}\n{\"name\":\"now\"}\n\n"
            "User: Weather?\n"
            "Assistant: [{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Oslo\"}}]\n"
            "Tool: -3 C\nAssistant:");
  auto bad = RenderChatPrompt(Messages(R"([{"role": "assistant", "tool_calls": [{"function": {}}]}])"),
                              ChatTemplate());
  EXPECT_EQ(ParamOf(bad.status()), "messages[0].tool_calls[0].function.name");
  auto no_content =
      RenderChatPrompt(Messages(R"([{"role": "tool", "tool_call_id": "c"}])"), ChatTemplate());
  EXPECT_EQ(ParamOf(no_content.status()), "messages[0].content");
}

// vLLM's add_generation_prompt=false and continue_final_message=true.
TEST(ChatTemplateTest, RenderOptions) {
  ChatRenderOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  auto bare = RenderChatPrompt(Messages(R"([{"role":"user","content":"x"}])"), ChatTemplate(),
                               no_prompt);
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(*bare, "User: x\n");
  ChatRenderOptions prefill;
  prefill.add_generation_prompt = false;
  prefill.continue_final_message = true;
  auto open = RenderChatPrompt(
      Messages(R"([{"role":"user","content":"x"},{"role":"assistant","content":"Sure, the"}])"),
      ChatTemplate(), prefill);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(*open, "User: x\nAssistant: Sure, the");  // no suffix, no generation prompt
  auto not_assistant =
      RenderChatPrompt(Messages(R"([{"role":"user","content":"x"}])"), ChatTemplate(), prefill);
  ASSERT_FALSE(not_assistant.ok());
  EXPECT_NE(not_assistant.status().message().find("continue_final_message"), std::string::npos);
}

TEST(ChatTemplateTest, FileReplacesEachPieceAndKeepsDefaultsForTheRest) {
  auto parsed = ChatTemplate::FromJson(R"({
      "system_prefix": "<|system|>", "system_suffix": "</s>",
      "user_prefix": "<|user|>", "user_suffix": "</s>",
      "assistant_prefix": "<|assistant|>", "assistant_suffix": "</s>",
      "generation_prompt": "<|assistant|>"})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->system_separator, "\n");  // not given: the default
  auto prompt = RenderChatPrompt(Messages(kConversation), *parsed);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(*prompt,
            "<|system|>Be brief.\nNo jokes.</s><|user|>Hi</s><|assistant|>Hello!</s>"
            "<|user|>How are you?</s><|assistant|>");
}

TEST(ChatTemplateTest, RejectsTyposAndWrongTypes) {
  auto typo = ChatTemplate::FromJson(R"({"user_prefx": "U: "})");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("user_prefx"), absl::string_view::npos);
  auto number = ChatTemplate::FromJson(R"({"user_suffix": 1})");
  ASSERT_FALSE(number.ok());
  EXPECT_NE(number.status().message().find("user_suffix: must be a string"),
            absl::string_view::npos);
  EXPECT_FALSE(ChatTemplate::FromJson("[]").ok());
  EXPECT_FALSE(ChatTemplate::FromJson("{").ok());
}

TEST(ChatTemplateTest, FromFileNamesTheFile) {
  const std::string dir = ::testing::TempDir();
  const std::string good = dir + "/template.json", bad = dir + "/bad.json";
  std::ofstream(good) << R"({"generation_prompt": "A:"})";
  std::ofstream(bad) << R"({"nope": ""})";
  auto loaded = ChatTemplate::FromFile(good);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->generation_prompt, "A:");
  auto refused = ChatTemplate::FromFile(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("bad.json"), absl::string_view::npos);
  EXPECT_EQ(ChatTemplate::FromFile(dir + "/missing.json").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ChatTemplateTest, MessageErrorsNameTheMessage) {
  struct Case {
    const char* messages;
    const char* param;
  };
  const Case cases[] = {
      {R"("hi")", "messages"},
      {R"([])", "messages"},
      {R"([1])", "messages[0]"},
      {R"([{"content":"x"}])", "messages[0].role"},
      {R"([{"role":"wizard","content":"x"}])", "messages[0].role"},
      {R"([{"role":"user"}])", "messages[0].content"},
      {R"([{"role":"user","content":[{"type":"image_url"}]}])", "messages[0].content[0].type"},
  };
  for (const Case& c : cases) {
    auto r = RenderChatPrompt(Messages(c.messages), ChatTemplate());
    ASSERT_FALSE(r.ok()) << c.messages;
    EXPECT_EQ(ParamOf(r.status()), c.param) << c.messages;
  }
  // An assistant turn without content (a tool call) renders as an empty turn.
  auto tool_turn =
      RenderChatPrompt(Messages(R"([{"role":"assistant"},{"role":"user","content":"x"}])"),
                       ChatTemplate());
  ASSERT_TRUE(tool_turn.ok());
  EXPECT_EQ(*tool_turn, "Assistant: \nUser: x\nAssistant:");
}

}  // namespace
}  // namespace blossom::gateway
