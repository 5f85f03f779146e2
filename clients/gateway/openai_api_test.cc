#include "clients/gateway/openai_api.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "clients/gateway/api_errors.h"
#include "clients/gateway/openai_test_util.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace blossom::gateway::openai {
namespace {

using test_responses::MakeEchoResponse;
using test_responses::MakeResponse;

struct BadCase {
  bool chat;
  std::string body;
  std::string message;  // expected substring of the error message
  std::string param;    // expected param ("" = none)
};

TEST(OpenAIApiTest, RejectsMalformedRequestsWithFieldNames) {
  const std::string kChat = R"("messages":[{"role":"user","content":"hi"}])";
  const BadCase cases[] = {
      {false, "", "invalid JSON", ""},
      {false, "{", "invalid JSON", ""},
      {false, "[1,2]", "must be a JSON object", ""},
      {false, R"({"prompt":"a","temperature":NaN})", "invalid JSON", ""},
      {false, R"({"prompt":"a","temperature":Infinity})", "invalid JSON", ""},
      {false, R"({"prompt":"a","temperature":1e999})", "number overflow", ""},
      {false, "{\"prompt\":\"\xff\xfe\"}", "not valid UTF-8", ""},
      {false, R"({"prompt":"\ud800"})", "invalid JSON", ""},
      // A megabyte of openers is refused at depth 129, not parsed into a million levels.
      {false, "{\"prompt\":" + std::string(1 << 20, '['), "nested deeper than 128", ""},
      {false, R"({})", "prompt: is required", "prompt"},
      {false, R"({"prompt":5})", "prompt: must be", "prompt"},
      {false, R"({"prompt":""})", "must not be empty", "prompt"},
      {false, R"({"prompt":["a",[1]]})", "all strings or all token-id lists", "prompt"},
      {false, R"({"prompt":["a",""]})", "must not be empty", "prompt"},
      {false, R"({"prompt":["a","b"],"n":100})", "at most 128", "n"},
      {false, R"({"prompt":[1,-2]})", "token ids", "prompt"},
      {false, R"({"prompt":"a","max_tokens":0})", "at least 1", "max_tokens"},
      {false, R"({"prompt":"a","max_tokens":"16"})", "must be an integer", "max_tokens"},
      {false, R"({"prompt":"a","max_tokens":1.5})", "must be an integer", "max_tokens"},
      {false, R"({"prompt":"a","temperature":"hot"})", "must be a number", "temperature"},
      {false, R"({"prompt":"a","temperature":2.5})", "must be in [0, 2]", "temperature"},
      {false, R"({"prompt":"a","top_p":0})", "top_p", "top_p"},
      {false, R"({"prompt":"a","top_p":1.1})", "top_p", "top_p"},
      {false, R"({"prompt":"a","typical_p":0})", "typical_p", "typical_p"},
      {false, R"({"prompt":"a","guided_grammar":""})", "a grammar in GBNF", "guided_grammar"},
      {true, "{" + kChat + R"(,"guided_choice":[]})", "non-empty list", "guided_choice"},
      {false, R"({"prompt":"a","guided_choice":["a",""]})", "non-empty strings", "guided_choice"},
      {false, R"({"prompt":"a","guided_choice":"a"})", "non-empty list", "guided_choice"},
      {false, R"({"prompt":"a","structured_outputs":{"structural_tag":"x"}})",
       "structured_outputs.structural_tag is not supported", "structured_outputs.structural_tag"},
      {false, R"({"prompt":"a","structured_outputs":{"choice":["x"]},"guided_choice":["y"]})",
       "guided_choice is already given", "structured_outputs.choice"},
      {false, R"({"prompt":"a","allowed_token_ids":[1,-2]})", "non-negative", "allowed_token_ids"},
      {false, R"({"prompt":"a","allowed_token_ids":[]})", "must not be empty", "allowed_token_ids"},
      {false, R"({"prompt":"a","allowed_token_ids":"1"})", "list of integers", "allowed_token_ids"},
      {false, R"({"prompt":"a","bad_words":[""]})", "must not be empty", "bad_words"},
      {false, R"({"prompt":"a","bad_words":[1]})", "list of strings", "bad_words"},
      {false, R"({"prompt":"a","bad_words":"foo"})", "list of strings", "bad_words"},
      {true, "{" + kChat + R"(,"logit_bias":{"x":1}})", "keys must be token ids", "logit_bias"},
      {false, R"({"prompt":"a","prompt_logprobs":-1})", "whole vocabulary", "prompt_logprobs"},
      {false, R"({"prompt":"a","prompt_logprobs":21})", "must be in [0, 20]", "prompt_logprobs"},
      {false, R"({"prompt":"a","prompt_logprobs":"2"})", "must be an integer", "prompt_logprobs"},
      {false, R"({"prompt":"a","prompt_logprobs":1,"stream":true})", "not available when stream",
       "prompt_logprobs"},
      {true, "{" + kChat + R"(,"prompt_logprobs":2,"stream":true})", "not available when stream",
       "prompt_logprobs"},
      {false, R"({"prompt":"a","truncate_prompt_tokens":5,"echo":true})",
       "truncate_prompt_tokens with echo is not supported", "truncate_prompt_tokens"},
      {false, R"({"prompt":"a","truncate_prompt_tokens":0})", "at least 1",
       "truncate_prompt_tokens"},
      // vLLM's -1 ("to the model's length") is named as unsupported, not as out of range.
      {false, R"({"prompt":"a","truncate_prompt_tokens":-1})", "to the model's length",
       "truncate_prompt_tokens"},
      {false, R"({"prompt":"a","truncate_prompt_tokens":-2})", "at least 1, got -2",
       "truncate_prompt_tokens"},
      {false, R"({"prompt":"a","use_beam_search":true,"stream":true})",
       "not supported with use_beam_search", "stream"},
      {true, "{" + kChat + R"(,"max_tokens":0})", "at least 1", "max_tokens"},
      {false, R"({"prompt":"a","n":200})", "at most 128", "n"},
      {false, R"({"prompt":"a","n":3,"best_of":2})", "at least n", "best_of"},
      {false, R"({"prompt":"a","stop":5})", "string or a list of strings", "stop"},
      {false, R"({"prompt":"a","stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n",
                                          "o","p","q"]})",
       "at most 16", "stop"},
      {false, R"({"prompt":"a","stop":[""]})", "must not be empty", "stop"},
      {false, R"({"prompt":"a","presence_penalty":3})", "presence_penalty", "presence_penalty"},
      {false, R"({"prompt":"a","frequency_penalty":-2.5})", "frequency_penalty", "frequency_penalty"},
      {false, R"({"prompt":"a","logprobs":21})", "at most 20", "logprobs"},
      {false, R"({"prompt":"a","logprobs":true})", "must be an integer", "logprobs"},
      {false, R"({"prompt":"a","priority":1.5})", "must be an integer", "priority"},
      {false, R"({"prompt":"a","include_stop_str_in_output":1})", "must be a boolean",
       "include_stop_str_in_output"},
      {false, R"({"prompt":"a","stream":"yes"})", "must be a boolean", "stream"},
      {false, R"({"prompt":"a","stream_options":{"include_usage":true}})", "only allowed with stream", "stream_options"},
      {false, R"({"prompt":"a","stream":true,"stream_options":{"include_usage":1}})", "must be a boolean", "stream_options.include_usage"},
      {false, R"({"prompt":"a","seed":"x"})", "must be an integer", "seed"},
      {false, R"({"prompt":"a","model":7})", "must be a string", "model"},
      // Issue 14: an 8,000-character name reached the server and came back as a 429.
      {false, absl::StrCat(R"({"prompt":"a","model":")", std::string(8000, 'm'), R"("})"),
       "longer than 256 bytes", "model"},
      {false, R"({"prompt":"a","logit_bias":{"1":100.5}})", "in [-100, 100]", "logit_bias"},
      {false, R"({"prompt":"a","logit_bias":{"-1":5}})", "keys must be token ids", "logit_bias"},
      {false, R"({"prompt":"a","logit_bias":{"1":"5"}})", "must be numbers", "logit_bias"},
      {false, R"({"prompt":"a","logit_bias":[1]})", "must be an object", "logit_bias"},
      {false, R"({"prompt":"a","suffix":"x"})", "suffix", "suffix"},
      {false, R"({"prompt":"a","user":1})", "must be a string", "user"},
      {true, R"({})", "messages: is required", "messages"},
      {true, R"({"messages":[]})", "must not be empty", "messages"},
      {true, R"({"messages":"hi"})", "must be a list", "messages"},
      {true, R"({"messages":[{"content":"hi"}]})", "role", "messages[0].role"},
      {true, R"({"messages":[{"role":"wizard","content":"hi"}]})", "must be one of", "messages[0].role"},
      {true, R"({"messages":[{"role":"user"}]})", "is required", "messages[0].content"},
      {true, R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "only text", "messages[0].content[0].type"},
      {true, R"({"messages":[{"role":"user","content":3}]})", "content", "messages[0].content"},
      {true, "{" + kChat + R"(,"logprobs":1})", "must be a boolean", "logprobs"},
      {true, "{" + kChat + R"(,"top_logprobs":2})", "requires logprobs=true", "top_logprobs"},
      {true, "{" + kChat + R"(,"tools":[{"type":"function"}]})", "must be an object",
       "tools[0].function"},
      {true, "{" + kChat + R"(,"tools":[{"type":"function","function":{"name":"f"}}]})",
       "needs a parser", "tool_choice"},
      {true, "{" + kChat + R"(,"tools":[{"type":"function","function":{"name":"f"}}],)"
                           R"("tool_choice":"required","guided_json":{}})",
       "cannot be combined", "tool_choice"},
      {true, "{" + kChat + R"(,"tools":[{"type":"function","function":{"name":"f"}}],)"
                           R"("tool_choice":"required","min_tokens":3})",
       "not with ignore_eos or min_tokens", "tool_choice"},
      {true, R"({"messages":[{"role":"tool","content":"42"}]})", "is required for a tool message",
       "messages[0].tool_call_id"},
      {true, "{" + kChat + R"(,"response_format":{"type":"xml"}})", "must be \"text\"",
       "response_format.type"},
      {true, "{" + kChat + R"(,"n":0})", "at least 1", "n"},
      {true, "{" + kChat + R"(,"add_generation_prompt":true,"continue_final_message":true})",
       "cannot be true together", "continue_final_message"},
      {true, "{" + kChat + R"(,"continue_final_message":true})", "the assistant's",
       "continue_final_message"},
  };
  for (const BadCase& c : cases) {
    absl::StatusOr<CompletionRequest> r = c.chat ? ParseChatRequest(c.body) : ParseCompletionRequest(c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(HttpStatusFor(r.status(), ApiFlavor::kOpenAI), 400) << c.body;
    EXPECT_TRUE(absl::StrContains(r.status().message(), c.message))
        << c.body << " -> " << r.status().message();
    EXPECT_EQ(ParamOf(r.status()), c.param) << c.body;
    // The error body has OpenAI's shape.
    Json error = Json::parse(OpenAIErrorJson(400, r.status().message(), ParamOf(r.status())));
    EXPECT_EQ(error["error"]["type"], "invalid_request_error");
    EXPECT_TRUE(error["error"].contains("code"));
  }
}

TEST(OpenAIApiTest, TranslatesCompletionRequest) {
  auto r = ParseCompletionRequest(
      R"({"model":"bloom","prompt":["Hello"],"max_tokens":7,"temperature":0.5,"top_p":0.9,
          "stop":"\n","seed":42,"presence_penalty":0.5,"frequency_penalty":-0.5,"logprobs":2,
          "n":1,"user":"u","unknown_field":{"ignored":true},"top_k":5,"ignore_eos":true,
          "priority":-3,"include_stop_str_in_output":true,"typical_p":0.8,"min_p":0.05,
          "repetition_penalty":1.1,"guided_json":null})");
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& req = r->request;
  EXPECT_EQ(req.text(), "Hello");
  EXPECT_EQ(req.model(), "bloom");
  EXPECT_EQ(req.stopping().max_new_tokens(), 7);
  EXPECT_FLOAT_EQ(req.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(req.sampling().top_p(), 0.9f);
  EXPECT_EQ(req.sampling().seed(), 42u);
  EXPECT_EQ(req.sampling().logprobs(), 2);
  EXPECT_EQ(req.sampling().top_k(), 5);
  EXPECT_FLOAT_EQ(req.sampling().typical_p(), 0.8f);
  EXPECT_FLOAT_EQ(req.sampling().min_p(), 0.05f);
  EXPECT_FLOAT_EQ(req.sampling().repetition_penalty(), 1.1f);
  EXPECT_TRUE(req.stopping().ignore_eos());
  EXPECT_EQ(req.priority(), -3);
  EXPECT_TRUE(req.stopping().include_stop_in_output());
  ASSERT_EQ(req.stopping().stop_size(), 1);
  EXPECT_EQ(req.stopping().stop(0), "\n");
  EXPECT_FALSE(r->stream);
  EXPECT_TRUE(r->logprobs);
}

// Fields of vLLM's and its clients' requests honoured rather than refused: truncation, eight
// stop sequences (lm-evaluation-harness's HumanEval), use_beam_search false, top_logprobs 0.
TEST(OpenAIApiTest, AcceptsWhatVllmClientsSend) {
  auto r = ParseCompletionRequest(
      R"({"prompt":"a","truncate_prompt_tokens":7,"use_beam_search":false,
          "stop":["\nclass","\ndef","\n#","\nif","\nprint","\n```","<|endoftext|>","</s>"]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.truncate_prompt_tokens(), 7);
  EXPECT_EQ(r->request.stopping().stop_size(), 8);
  auto chat = ParseChatRequest(R"({"messages":[{"role":"user","content":"hi"}],"top_logprobs":0,
                                   "truncate_prompt_tokens":3})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_FALSE(chat->logprobs);
  EXPECT_EQ(chat->request.truncate_prompt_tokens(), 3);
}

TEST(OpenAIApiTest, AbsentFieldsStayAbsent) {
  auto r = ParseCompletionRequest(R"({"prompt":[[1,2,3]],"temperature":null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.token_ids().ids_size(), 3);
  EXPECT_FALSE(r->request.sampling().has_temperature());
  EXPECT_FALSE(r->request.stopping().has_max_new_tokens());
  EXPECT_FALSE(r->request.sampling().has_logprobs());
}

TEST(OpenAIApiTest, RendersChatTemplate) {
  auto r = ParseChatRequest(
      R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},
          {"role":"assistant","content":"Hello!"},
          {"role":"user","content":[{"type":"text","text":"How "},{"type":"text","text":"are you?"}]}],
          "stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":3,
          "max_completion_tokens":9})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.text(),
            "Be brief.\n\nUser: Hi\nAssistant: Hello!\nUser: How \nare you?\nAssistant:");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->request.sampling().logprobs(), 3);
  EXPECT_EQ(r->request.stopping().max_new_tokens(), 9);
  EXPECT_FALSE(r->request.stopping().max_new_tokens_to_limit());

  ChatTemplate custom;
  custom.user_prefix = "<|user|>";
  custom.generation_prompt = "<|assistant|>";
  auto templated = ParseChatRequest(R"({"messages":[{"role":"user","content":"Hi"}]})", custom);
  ASSERT_TRUE(templated.ok()) << templated.status();
  EXPECT_EQ(templated->request.text(), "<|user|>Hi\n<|assistant|>");
}

// Chat without max_tokens runs to the context limit (OpenAI, vLLM); completions keep 16.
TEST(OpenAIApiTest, DefaultMaxTokensDiffersByEndpoint) {
  auto chat = ParseChatRequest(R"({"messages":[{"role":"user","content":"Hi"}]})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_FALSE(chat->request.stopping().has_max_new_tokens());
  EXPECT_TRUE(chat->request.stopping().max_new_tokens_to_limit());
  auto completion = ParseCompletionRequest(R"({"prompt":"Hi"})");
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_FALSE(completion->request.stopping().has_max_new_tokens());  // the server's 16
  EXPECT_FALSE(completion->request.stopping().max_new_tokens_to_limit());
  // An explicit null is vLLM's None: up to the context limit on both routes (only an absent
  // completions field takes the default 16).
  for (const bool chat : {false, true}) {
    auto null = chat ? ParseChatRequest(R"({"messages":[{"role":"user","content":"Hi"}],)"
                                        R"("max_tokens":null})")
                     : ParseCompletionRequest(R"({"prompt":"Hi","max_tokens":null})");
    ASSERT_TRUE(null.ok()) << null.status();
    EXPECT_FALSE(null->request.stopping().has_max_new_tokens()) << chat;
    EXPECT_TRUE(null->request.stopping().max_new_tokens_to_limit()) << chat;
  }
}

// Chat's max_completion_tokens (OpenAI's current name) wins over the deprecated max_tokens,
// as vLLM's `max_completion_tokens or max_tokens`.
TEST(OpenAIApiTest, MaxCompletionTokensWinsOverMaxTokens) {
  const std::string messages = R"("messages":[{"role":"user","content":"Hi"}])";
  for (const std::string fields : {R"("max_tokens":5,"max_completion_tokens":9)",
                                   R"("max_completion_tokens":9,"max_tokens":5)",
                                   R"("max_completion_tokens":9,"max_tokens":null)"}) {
    auto r = ParseChatRequest("{" + messages + "," + fields + "}");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->request.stopping().max_new_tokens(), 9) << fields;
  }
  auto only_max_tokens =
      ParseChatRequest("{" + messages + R"(,"max_tokens":5,"max_completion_tokens":null})");
  ASSERT_TRUE(only_max_tokens.ok()) << only_max_tokens.status();
  EXPECT_EQ(only_max_tokens->request.stopping().max_new_tokens(), 5);
  // Both are still checked.
  auto bad = ParseChatRequest("{" + messages + R"(,"max_tokens":"5","max_completion_tokens":9})");
  EXPECT_EQ(ParamOf(bad.status()), "max_tokens");
}

TEST(OpenAIApiTest, SkipSpecialTokensIsPassedOnOnlyWhenGiven) {
  auto absent = ParseCompletionRequest(R"({"prompt":"Hi"})");
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->request.stopping().has_skip_special_tokens());  // server default: true
  auto keep = ParseCompletionRequest(R"({"prompt":"Hi","skip_special_tokens":false})");
  ASSERT_TRUE(keep.ok());
  ASSERT_TRUE(keep->request.stopping().has_skip_special_tokens());
  EXPECT_FALSE(keep->request.stopping().skip_special_tokens());
  auto bad = ParseChatRequest(R"({"messages":[{"role":"user","content":"x"}],"skip_special_tokens":1})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(ParamOf(bad.status()), "skip_special_tokens");
}

// Only OpenAI's finish reasons reach clients.
TEST(OpenAIApiTest, FinishReasonsAreOpenAIs) {
  EXPECT_STREQ(FinishReasonString(blossom::v1::FINISH_REASON_EOS_TOKEN), "stop");
  EXPECT_STREQ(FinishReasonString(blossom::v1::FINISH_REASON_STOP_TOKEN), "stop");
  EXPECT_STREQ(FinishReasonString(blossom::v1::FINISH_REASON_STOP_STRING), "stop");
  EXPECT_STREQ(FinishReasonString(blossom::v1::FINISH_REASON_LENGTH), "length");
  EXPECT_STREQ(FinishReasonString(blossom::v1::FINISH_REASON_CANCELLED), "length");
  EXPECT_STREQ(FinishReasonString(blossom::v1::FINISH_REASON_ERROR), "length");
  EXPECT_STREQ(FinishReasonString(blossom::v1::FINISH_REASON_ABORTED), "length");
}

TEST(OpenAIApiTest, EncodesCompletionResponseWithLogprobs) {
  auto r = ParseCompletionRequest(R"({"prompt":"x","logprobs":1})");
  ASSERT_TRUE(r.ok());
  r->model = "m";
  Json j = CompletionResponse(*r, MakeResponse(), "cmpl-1", 123);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["system_fingerprint"], "blossom-0.1.0-float32");
  EXPECT_EQ(j["choices"][0]["text"], "Hi there");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], Json({"Hi", " there"}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], Json({0, 2}));
  EXPECT_DOUBLE_EQ(j["choices"][0]["logprobs"]["top_logprobs"][1][" there"].get<double>(), -1.0);
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
}

// echo + logprobs, as lm-evaluation-harness sends them for loglikelihood requests: prompt tokens
// first in every list, the first one null.
TEST(OpenAIApiTest, EchoPutsThePromptTokensFirst) {
  auto r = ParseCompletionRequest(R"({"prompt":"Say","echo":true,"logprobs":1,"max_tokens":2})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->echo);
  EXPECT_EQ(r->request.sampling().prompt_logprobs(), 1);
  blossom::v1::GenerateResponse response = MakeEchoResponse();
  response.mutable_final()->mutable_usage()->set_cached_prompt_tokens(2);
  Json j = CompletionResponse(*r, response, "cmpl-1", 123);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  const Json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(j["choices"][0]["text"], "SayHi there");
  EXPECT_EQ(lp["tokens"], Json({"S", "ay", "Hi", " there"}));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][1].get<double>(), -3.5);
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_DOUBLE_EQ(lp["top_logprobs"][1]["ee"].get<double>(), -0.5);
  EXPECT_DOUBLE_EQ(lp["top_logprobs"][1]["ay"].get<double>(), -3.5) << "the token itself too";
  EXPECT_EQ(lp["text_offset"], Json({0, 1, 3, 5}));
  // A token-id prompt has no text: the echoed prompt is its tokens' texts.
  auto ids = ParseCompletionRequest(R"({"prompt":[5,6],"echo":true})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->request.sampling().prompt_logprobs(), 0);
  Json k = CompletionResponse(*ids, response, "cmpl-2", 123);
  EXPECT_EQ(k["choices"][0]["text"], "SayHi there");
  EXPECT_TRUE(k["choices"][0]["logprobs"].is_null());
  // A character split over byte tokens is echoed whole (a decode of the ids, as vLLM), not as
  // one U+FFFD per token.
  blossom::v1::GenerateResponse split = response;
  split.clear_prompt_logprobs();
  for (const char* piece : {"\xE2", "\x82", "\xAC", " a"}) {
    blossom::v1::Token* t = split.add_prompt_logprobs();
    t->set_token_bytes(piece);
    t->set_text(static_cast<unsigned char>(piece[0]) >= 0x80 ? "\xEF\xBF\xBD" : piece);
  }
  EXPECT_EQ(CompletionResponse(*ids, split, "cmpl-4", 123)["choices"][0]["text"],
            "\xE2\x82\xAC aHi there");
  // A text prompt echoed without logprobs needs no prompt logprobs: its text is the request's.
  auto text_echo = ParseCompletionRequest(R"({"prompt":"Say","echo":true,"max_tokens":2})");
  ASSERT_TRUE(text_echo.ok()) << text_echo.status();
  EXPECT_FALSE(text_echo->request.sampling().has_prompt_logprobs());
  Json t = CompletionResponse(*text_echo, MakeResponse(), "cmpl-3", 123);
  EXPECT_EQ(t["choices"][0]["text"], "SayHi there");
  // Without echo nothing asks for prompt logprobs.
  auto plain = ParseCompletionRequest(R"({"prompt":"Say","logprobs":1})");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->request.sampling().has_prompt_logprobs());
}

// OpenAI's logit_bias and vLLM's allowed_token_ids and bad_words pass to the server as they are
// (it checks ids against its vocabulary and tokenizes the words); {} is no bias.
TEST(OpenAIApiTest, LogitBiasAllowedTokensAndBadWordsPassThrough) {
  auto r = ParseCompletionRequest(
      R"({"prompt":"a","logit_bias":{"5":-100,"12":2.5},"allowed_token_ids":[5,12,40],)"
      R"("bad_words":["foo","bar baz"]})");
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& s = r->request.sampling();
  ASSERT_EQ(s.logit_bias().size(), 2u);
  EXPECT_EQ(s.logit_bias().at(5), -100.0f);
  EXPECT_EQ(s.logit_bias().at(12), 2.5f);
  EXPECT_EQ(std::vector<int32_t>(s.allowed_token_ids().begin(), s.allowed_token_ids().end()),
            std::vector<int32_t>({5, 12, 40}));
  EXPECT_EQ(std::vector<std::string>(s.bad_words().begin(), s.bad_words().end()),
            std::vector<std::string>({"foo", "bar baz"}));
  auto chat = ParseChatRequest(R"({"messages":[{"role":"user","content":"hi"}],"logit_bias":{}})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_TRUE(chat->request.sampling().logit_bias().empty());
  auto many = ParseChatRequest(R"({"messages":[{"role":"user","content":"hi"}],"n":2,)"
                               R"("logit_bias":{"7":1}})");
  ASSERT_TRUE(many.ok()) << many.status();
  ASSERT_EQ(many->batch.size(), 2u);
  EXPECT_EQ(many->batch[1].sampling().logit_bias().at(7), 1.0f) << "every choice has them";
}

TEST(OpenAIApiTest, GuidedChoiceInBothSpellings) {
  auto r = ParseCompletionRequest(R"({"prompt":"a","guided_choice":["yes","no"]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(std::vector<std::string>(r->request.sampling().guided_choice().begin(),
                                     r->request.sampling().guided_choice().end()),
            std::vector<std::string>({"yes", "no"}));
  auto chat = ParseChatRequest(R"({"messages":[{"role":"user","content":"hi"}],)"
                               R"("structured_outputs":{"choice":["a b","c"],"json":null}})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->request.sampling().guided_choice_size(), 2);
}

// vLLM's prompt_logprobs: asked of the server (the larger of it and the echo's top count), and
// returned per completions choice as [null, {"<id>": {logprob, rank, decoded_token}}, ...].
TEST(OpenAIApiTest, PromptLogprobsInVllmShape) {
  auto r = ParseCompletionRequest(R"({"prompt":"Say","prompt_logprobs":1,"max_tokens":2})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_logprobs, 1);
  EXPECT_EQ(r->request.sampling().prompt_logprobs(), 1);
  blossom::v1::GenerateResponse response = MakeResponse();
  ASSERT_TRUE(google::protobuf::TextFormat::MergeFromString(
      R"pb(prompt_logprobs { id: 5 text: "S" }
           prompt_logprobs { id: 6 text: "ay" logprob: -3.5 rank: 4
                             top_logprobs { token_id: 7 token: "ee" logprob: -0.5 }
                             top_logprobs { token_id: 8 token: "oo" logprob: -1.5 } }
           prompt_logprobs { id: 9 text: "!" logprob: -1e30 rank: 900 })pb",
      &response));
  const Json j = CompletionResponse(*r, response, "cmpl-1", 123);
  const Json& choice = j["choices"][0];
  EXPECT_EQ(choice["text"], "Hi there") << "no echo: the prompt is not in the text";
  EXPECT_TRUE(choice["logprobs"].is_null());
  const Json& plp = choice["prompt_logprobs"];
  ASSERT_EQ(plp.size(), 3u);
  EXPECT_TRUE(plp[0].is_null());
  // The prompt token with its own rank, and one alternative (the second is beyond the asked 1).
  EXPECT_EQ(plp[1], Json::parse(R"({"6": {"logprob": -3.5, "rank": 4, "decoded_token": "ay"},
                                     "7": {"logprob": -0.5, "rank": 1, "decoded_token": "ee"}})"));
  EXPECT_EQ(plp[2]["9"]["logprob"], -9999.0) << "clamped as vLLM does";
  EXPECT_EQ(plp[2]["9"]["rank"], 900);
  EXPECT_FALSE(j.contains("prompt_logprobs")) << "completions: on the choice only";

  // With echo + logprobs the server is asked for the larger top count, and each list shows its
  // own: the echo's top_logprobs 1 entry, prompt_logprobs 2.
  auto both = ParseCompletionRequest(
      R"({"prompt":"Say","echo":true,"logprobs":1,"prompt_logprobs":2,"max_tokens":2})");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->request.sampling().prompt_logprobs(), 2);
  const Json k = CompletionResponse(*both, response, "cmpl-2", 123);
  EXPECT_EQ(k["choices"][0]["logprobs"]["top_logprobs"][1].size(), 2u);  // and the token
  EXPECT_EQ(k["choices"][0]["prompt_logprobs"][1].size(), 3u);
  auto fewer = ParseCompletionRequest(
      R"({"prompt":"Say","echo":true,"logprobs":3,"prompt_logprobs":0})");
  ASSERT_TRUE(fewer.ok()) << fewer.status();
  EXPECT_EQ(fewer->request.sampling().prompt_logprobs(), 3);

  // Several choices: each carries its own prompt's.
  auto batch = ParseCompletionRequest(R"({"prompt":["a","b"],"prompt_logprobs":0})");
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->batch.size(), 2u);
  EXPECT_EQ(batch->batch[1].sampling().prompt_logprobs(), 0);
  const Json b = CompletionResponse(*batch, {response, MakeResponse()}, "cmpl-3", 123);
  EXPECT_EQ(b["choices"][0]["prompt_logprobs"][1].size(), 1u);
  EXPECT_TRUE(b["choices"][1]["prompt_logprobs"].empty());

  // Streaming with 0 is accepted (vLLM's rule) and asks for nothing.
  auto streamed = ParseCompletionRequest(R"({"prompt":"Say","prompt_logprobs":0,"stream":true})");
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  EXPECT_FALSE(streamed->request.sampling().has_prompt_logprobs());
  EXPECT_EQ(streamed->prompt_logprobs, -1);
}

TEST(OpenAIApiTest, ChatPromptLogprobsAreOnTheResponse) {
  auto r = ParseChatRequest(
      R"({"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":0,"n":2})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->batch.size(), 2u);
  EXPECT_EQ(r->batch[0].sampling().prompt_logprobs(), 0);
  EXPECT_FALSE(r->batch[1].sampling().has_prompt_logprobs()) << "computed once, for choice 0";
  blossom::v1::GenerateResponse response = MakeResponse();
  ASSERT_TRUE(google::protobuf::TextFormat::MergeFromString(
      R"pb(prompt_logprobs { id: 5 text: "S" }
           prompt_logprobs { id: 6 text: "ay" logprob: -3.5 rank: 2
                             top_logprobs { token_id: 7 token: "ee" logprob: -0.5 } })pb",
      &response));
  const Json j = CompletionResponse(*r, {response, response}, "chatcmpl-1", 123);
  EXPECT_EQ(j["prompt_logprobs"],
            Json::parse(R"([null, {"6": {"logprob": -3.5, "rank": 2, "decoded_token": "ay"}}])"));
  EXPECT_FALSE(j["choices"][0].contains("prompt_logprobs"));
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
}

// echo with max_tokens 0 scores the prompt: one token is generated (the engine must) and left
// out of the text, the logprobs and the usage.
TEST(OpenAIApiTest, EchoWithZeroMaxTokensReturnsThePromptOnly) {
  auto r = ParseCompletionRequest(R"({"prompt":[5,6],"echo":true,"logprobs":0,"max_tokens":0})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->prompt_only);
  EXPECT_EQ(r->request.stopping().max_new_tokens(), 1);
  blossom::v1::GenerateResponse response = MakeResponse();
  ASSERT_TRUE(google::protobuf::TextFormat::MergeFromString(
      R"pb(prompt_logprobs { id: 5 text: "S" }
           prompt_logprobs { id: 6 text: "ay" logprob: -3.5 })pb",
      &response));
  const Json j = CompletionResponse(*r, response, "cmpl-1", 123);
  EXPECT_EQ(j["choices"][0]["text"], "Say");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], Json({"S", "ay"}));
  EXPECT_EQ(j["usage"]["completion_tokens"], 0);
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"]);
}

// vLLM's stop_reason: the matched stop string, the stop token's id, or null.
TEST(OpenAIApiTest, StopReasonSaysWhichStop) {
  auto r = ParseCompletionRequest(R"({"prompt":"Say"})");
  ASSERT_TRUE(r.ok()) << r.status();
  blossom::v1::GenerateResponse response = MakeResponse();
  EXPECT_TRUE(CompletionResponse(*r, response, "c", 1)["choices"][0]["stop_reason"].is_null());
  response.mutable_final()->set_finish_reason(blossom::v1::FINISH_REASON_STOP_STRING);
  response.mutable_final()->set_matched_stop("###");
  EXPECT_EQ(CompletionResponse(*r, response, "c", 1)["choices"][0]["stop_reason"], "###");
  response.mutable_final()->set_finish_reason(blossom::v1::FINISH_REASON_STOP_TOKEN);
  EXPECT_EQ(CompletionResponse(*r, response, "c", 1)["choices"][0]["stop_reason"], 6);
  response.mutable_final()->set_finish_reason(blossom::v1::FINISH_REASON_EOS_TOKEN);
  EXPECT_TRUE(CompletionResponse(*r, response, "c", 1)["choices"][0]["stop_reason"].is_null());
  // Streamed: on the final chunk.
  StreamEncoder encoder(*r, "c", 1);
  blossom::v1::GenerateStreamResponse last;
  last.mutable_token()->set_id(9);
  last.mutable_token()->set_text("x");
  last.mutable_final()->set_finish_reason(blossom::v1::FINISH_REASON_STOP_TOKEN);
  const std::string events = encoder.OnMessage(last);
  const Json chunk = Json::parse(events.substr(6, events.find("\n\n") - 6));
  EXPECT_EQ(chunk["choices"][0]["stop_reason"], 9);
}

// text_offset counts characters, as OpenAI and vLLM (Python's len), not UTF-8 bytes.
TEST(OpenAIApiTest, TextOffsetsCountCharacters) {
  auto r = ParseCompletionRequest(R"({"prompt":"Say","logprobs":0})");
  ASSERT_TRUE(r.ok()) << r.status();
  blossom::v1::GenerateResponse response;
  for (const char* text : {"\xC3\xA9t\xC3\xA9", " \xE2\x82\xAC", "!"}) {  // "été", " €", "!"
    auto* t = response.add_tokens();
    t->set_text(text);
    t->set_logprob(-1.0f);
  }
  const Json j = CompletionResponse(*r, response, "c", 1);
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], Json({0, 3, 5}));
  // logprobs 0: each entry of top_logprobs is the token itself (OpenAI's logprobs+1, vLLM's).
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][2], Json({{"!", -1.0}}));
}

TEST(OpenAIApiTest, EncodesChatResponse) {
  auto r = ParseChatRequest(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true})");
  ASSERT_TRUE(r.ok());
  Json j = CompletionResponse(*r, MakeResponse(), "chatcmpl-1", 123);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hi there");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["token"], "Hi");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["bytes"], Json({72, 105}));
  EXPECT_EQ(j["system_fingerprint"], "blossom-0.1.0-float32");

  // Half of "é" (0xC3 0xA9): the text is lossy (U+FFFD), the bytes are exact.
  blossom::v1::GenerateResponse partial = MakeResponse();
  partial.mutable_tokens(0)->set_text("\xEF\xBF\xBD");
  partial.mutable_tokens(0)->set_token_bytes("\xC3");
  partial.mutable_tokens(0)->mutable_top_logprobs(0)->set_token_bytes("\xC3");
  Json p = CompletionResponse(*r, partial, "chatcmpl-2", 123);
  EXPECT_EQ(p["choices"][0]["logprobs"]["content"][0]["bytes"], Json({0xC3}));
  EXPECT_EQ(p["choices"][0]["logprobs"]["content"][0]["top_logprobs"][0]["bytes"], Json({0xC3}));
}

}  // namespace
}  // namespace blossom::gateway::openai
