// The gateway's routes in-process (fixture: gateway_test_util.h): OpenAI and TGI requests and
// responses, streaming, backend statuses mapped to HTTP, validation before the backend, and
// request ids (X-Request-Id).
#include "clients/gateway/gateway.h"

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "clients/gateway/gateway_test_util.h"
#include "clients/gateway/json_fields.h"
#include "gtest/gtest.h"
#include "server/http/test_client.h"

namespace blossom::gateway {
namespace {

using testing::Client;
using testing::GatewayTest;
namespace v1 = ::blossom::v1;

TEST_F(GatewayTest, UnaryCompletion) {
  GatewayOptions options;
  options.served_model_name = "bloom";
  StartGateway(options);
  Client::Reply reply = Request("POST", "/v1/completions",
                                R"({"model":"bloom","prompt":"hi","max_tokens":2,"logprobs":0})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.headers["content-type"], "application/json");
  Json j = Json::parse(reply.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "bloom");
  EXPECT_TRUE(absl::StartsWith(j["id"].get<std::string>(), "cmpl-"));
  EXPECT_EQ(j["choices"][0]["text"], "Hello");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], Json({"Hel", "lo"}));
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  v1::GenerateRequest seen = fake_.last_request();
  EXPECT_EQ(seen.text(), "hi");
  EXPECT_EQ(seen.stopping().max_new_tokens(), 2);
  EXPECT_EQ(seen.model(), "");  // the gateway checked the served name itself
  EXPECT_FALSE(seen.request_id().empty());

  Client::Reply wrong = Request("POST", "/v1/completions", R"({"model":"gpt-4","prompt":"hi"})");
  EXPECT_EQ(wrong.status, 404);
  EXPECT_EQ(Json::parse(wrong.body)["error"]["param"], "model");
}

// lm-evaluation-harness's local-completions with batch_size > 1 sends a list of prompts; n > 1
// asks for several samples: one generation per choice, choices in order, usage summed.
TEST_F(GatewayTest, SeveralPromptsAndNGiveOneChoiceEach) {
  StartGateway({});
  Client::Reply reply = Request(
      "POST", "/v1/completions",
      R"({"prompt":["a","b"],"n":2,"seed":10,"max_tokens":2,"echo":true,"logprobs":0})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json j = Json::parse(reply.body);
  ASSERT_EQ(j["choices"].size(), 4u) << reply.body;
  const std::vector<std::string> prompts = {"a", "a", "b", "b"};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(j["choices"][k]["index"], k);
    EXPECT_EQ(j["choices"][k]["text"], prompts[k] + "Hello");  // echo: each its own prompt
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 6);       // each prompt once (3 tokens each)
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);   // every choice
  std::vector<v1::GenerateRequest> seen = fake_.all_requests();
  ASSERT_EQ(seen.size(), 4u);
  std::multiset<std::pair<std::string, uint64_t>> sent;
  for (const v1::GenerateRequest& r : seen) {
    sent.insert({r.text(), r.sampling().seed()});
    EXPECT_EQ(r.group_size(), 4);  // queued together: the server checks they fit its queue
  }
  EXPECT_EQ(sent, (std::multiset<std::pair<std::string, uint64_t>>{
                      {"a", 10}, {"a", 11}, {"b", 10}, {"b", 11}}));
}

// TGI's best_of candidates are queued together too.
TEST_F(GatewayTest, TgiBestOfCandidatesAreOneGroup) {
  StartGateway({});
  Client::Reply reply = Request("POST", "/generate",
                                R"({"inputs":"a","parameters":{"best_of":3,"do_sample":true}})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  std::vector<v1::GenerateRequest> seen = fake_.all_requests();
  ASSERT_EQ(seen.size(), 3u);
  for (const v1::GenerateRequest& r : seen) EXPECT_EQ(r.group_size(), 3);
  Client::Reply single = Request("POST", "/generate", R"({"inputs":"a"})");
  ASSERT_EQ(single.status, 200) << single.body;
  EXPECT_EQ(fake_.last_request().group_size(), 0);
}

// use_beam_search: one BeamSearch per prompt, run at once, each carrying the request's beams
// (prompts x n) as its group. A group the server's waiting queue could never hold is refused
// for good (GROUP_TOO_LARGE): a 400 naming n, never a 429 a client would retry forever.
TEST_F(GatewayTest, BeamSearchesOfARequestAreOneGroup) {
  StartGateway({});
  Client::Reply reply = Request(
      "POST", "/v1/completions",
      R"({"prompt":["a","b","c"],"n":2,"use_beam_search":true,"max_tokens":2})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(Json::parse(reply.body)["choices"].size(), 6u) << reply.body;
  std::vector<v1::BeamSearchRequest> seen = fake_.beam_requests();
  ASSERT_EQ(seen.size(), 3u);
  std::multiset<std::string> prompts;
  for (const v1::BeamSearchRequest& r : seen) {
    prompts.insert(r.text());
    EXPECT_EQ(r.beam_width(), 2);
    EXPECT_EQ(r.group_size(), 6);
  }
  EXPECT_EQ(prompts, (std::multiset<std::string>{"a", "b", "c"}));

  // The server's refusal (server/beam_search_convert.cc) as it sends it.
  Client::Reply refused = Request(
      "POST", "/v1/completions",
      R"({"prompt":["a","fail:11:the request asks for 4 beams at once, more than this server's )"
      R"(waiting queue holds (max_waiting_requests 3)|group_size|GROUP_TOO_LARGE"],"n":2,)"
      R"("use_beam_search":true})");
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(refused.headers.count("retry-after"), 0u);
  const Json error = Json::parse(refused.body)["error"];
  EXPECT_EQ(error["param"], "n") << refused.body;
  EXPECT_EQ(error["code"], "group_too_large");
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_TRUE(absl::StrContains(error["message"].get<std::string>(), "4 beams at once"))
      << refused.body;
}

// Streamed, the choices' chunks interleave, each with its index; one usage chunk and one
// [DONE] follow the last choice's end.
TEST_F(GatewayTest, SeveralChoicesStreamWithTheirIndexes) {
  StartGateway({});
  for (const bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completions");
    Client::Reply reply =
        chat ? Request("POST", "/v1/chat/completions",
                       R"({"messages":[{"role":"user","content":"hi"}],"n":3,"stream":true,
                           "stream_options":{"include_usage":true}})")
             : Request("POST", "/v1/completions",
                       R"({"prompt":["a","b","c"],"stream":true,
                           "stream_options":{"include_usage":true}})");
    ASSERT_EQ(reply.status, 200) << reply.body;
    std::vector<std::string> events = Events(reply.body);
    ASSERT_GE(events.size(), 3u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::map<int, std::string> text;
    std::map<int, int> finishes;
    int usage_chunks = 0;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      const Json j = Json::parse(events[i]);
      if (!j["usage"].is_null()) {
        ++usage_chunks;
        EXPECT_EQ(j["usage"]["completion_tokens"], 6);                // 2 tokens x 3 choices
        EXPECT_EQ(j["usage"]["prompt_tokens"], chat ? 3 : 9);        // each prompt once
        EXPECT_EQ(i + 2, events.size()) << "usage is the last chunk";
        continue;
      }
      for (const Json& c : j["choices"]) {
        const int index = c["index"];
        text[index] += chat ? c["delta"].value("content", "") : c["text"].get<std::string>();
        if (!c["finish_reason"].is_null()) ++finishes[index];
      }
    }
    EXPECT_EQ(usage_chunks, 1);
    EXPECT_EQ(text, (std::map<int, std::string>{{0, "Hello"}, {1, "Hello"}, {2, "Hello"}}));
    EXPECT_EQ(finishes, (std::map<int, int>{{0, 1}, {1, 1}, {2, 1}}));
  }
}

// A choice that fails mid-response ends the stream with an error event and cancels the others.
TEST_F(GatewayTest, AFailedStreamedChoiceEndsTheStream) {
  StartGateway({});
  Client::Reply reply = Request("POST", "/v1/completions",
                                R"({"prompt":["hang","fail:14:gone||SHUTTING_DOWN"],"stream":true})");
  // "hang" sends a message first, so the headers may be out: an error event then, else a 503.
  if (reply.status == 200) {
    std::vector<std::string> events = Events(reply.body);
    ASSERT_GE(events.size(), 2u) << reply.body;
    EXPECT_EQ(events.back(), "[DONE]");
    EXPECT_NE(events[events.size() - 2].find("gone"), std::string::npos) << reply.body;
  } else {
    EXPECT_EQ(reply.status, 503) << reply.body;
  }
  ExpectTheHangingChoiceCancelled();
}

// One failed choice fails the request, and the choices still running are cancelled.
TEST_F(GatewayTest, AFailedChoiceFailsTheBatchAndCancelsTheRest) {
  StartGateway({});
  Client::Reply reply = Request(
      "POST", "/v1/completions",
      R"({"prompt":["hang","fail:3:bad prompt"],"max_tokens":2})");
  EXPECT_EQ(reply.status, 400) << reply.body;
  EXPECT_NE(reply.body.find("bad prompt"), std::string::npos) << reply.body;
  ExpectTheHangingChoiceCancelled();
}

TEST_F(GatewayTest, ChatStreamEndsWithDone) {
  StartGateway({});
  Client::Reply reply = Request(
      "POST", "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.headers["content-type"], "text/event-stream");
  std::vector<std::string> events = Events(reply.body);
  ASSERT_GE(events.size(), 4u) << reply.body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string content;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    Json chunk = Json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    if (!chunk["choices"].empty() && chunk["choices"][0]["delta"].contains("content")) {
      content += chunk["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(content, "Hello");
  Json usage = Json::parse(events[events.size() - 2]);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  EXPECT_EQ(fake_.last_request().text(), "User: hi\nAssistant:");
}

// vLLM's chat echo: the last message, when it is the answer's role (assistant), starts the
// answer's content; streamed, it follows the role chunk. Another last role echoes nothing.
TEST_F(GatewayTest, ChatEchoStartsTheAnswerWithTheLastAssistantMessage) {
  StartGateway({});
  const std::string continued =
      R"({"messages":[{"role":"user","content":"U1"},{"role":"assistant","content":"A1"}],)"
      R"("continue_final_message":true,"add_generation_prompt":false,"echo":true)";
  Client::Reply unary = Request("POST", "/v1/chat/completions", continued + "}");
  ASSERT_EQ(unary.status, 200) << unary.body;
  EXPECT_EQ(Json::parse(unary.body)["choices"][0]["message"]["content"], "A1Hello") << unary.body;
  Client::Reply stream = Request("POST", "/v1/chat/completions", continued + R"(,"stream":true})");
  ASSERT_EQ(stream.status, 200) << stream.body;
  std::string content;
  for (const std::string& event : Events(stream.body)) {
    if (event == "[DONE]") continue;
    const Json delta = Json::parse(event)["choices"][0]["delta"];
    if (delta.contains("content") && delta["content"].is_string()) content += delta["content"];
  }
  EXPECT_EQ(content, "A1Hello") << stream.body;
  Client::Reply user_last = Request(
      "POST", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"U1"}],"echo":true})");
  ASSERT_EQ(user_last.status, 200) << user_last.body;
  EXPECT_EQ(Json::parse(user_last.body)["choices"][0]["message"]["content"], "Hello");
  // Without a generation prompt the answer continues the last message, whatever its role.
  Client::Reply no_prompt = Request(
      "POST", "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"U1"}],"add_generation_prompt":false,"echo":true})");
  ASSERT_EQ(no_prompt.status, 200) << no_prompt.body;
  EXPECT_EQ(Json::parse(no_prompt.body)["choices"][0]["message"]["content"], "U1Hello");
}

TEST_F(GatewayTest, TgiGenerateAndStream) {
  StartGateway({});
  Client::Reply unary = Request("POST", "/generate", R"({"inputs":"hi","parameters":{"details":true}})");
  ASSERT_EQ(unary.status, 200) << unary.body;
  Json j = Json::parse(unary.body);
  EXPECT_EQ(j["generated_text"], "Hello");
  EXPECT_EQ(j["details"]["generated_tokens"], 2);
  EXPECT_EQ(fake_.last_request().sampling().temperature(), 0.0f);  // greedy by default

  Client::Reply stream = Request("POST", "/generate_stream", R"({"inputs":"hi"})");
  ASSERT_EQ(stream.status, 200) << stream.body;
  std::vector<std::string> events = Events(stream.body);
  ASSERT_EQ(events.size(), 2u) << stream.body;
  EXPECT_EQ(Json::parse(events[0])["token"]["text"], "Hel");
  EXPECT_TRUE(Json::parse(events[0])["generated_text"].is_null());
  EXPECT_EQ(Json::parse(events[1])["generated_text"], "Hello");

  // TGI's "/" route, as the text-generation Python client uses it (it sends return_full_text
  // false); without the field the route returns the prompt too, as TGI does for BLOOM.
  Client::Reply compat = Request(
      "POST", "/", R"({"inputs":"hi","stream":false,"parameters":{"return_full_text":false}})");
  ASSERT_EQ(compat.status, 200) << compat.body;
  EXPECT_EQ(Json::parse(compat.body)[0]["generated_text"], "Hello");
  Client::Reply compat_default = Request("POST", "/", R"({"inputs":"hi","stream":false})");
  ASSERT_EQ(compat_default.status, 200) << compat_default.body;
  EXPECT_EQ(Json::parse(compat_default.body)[0]["generated_text"], "hiHello");
  Client::Reply prefill_stream = Request(
      "POST", "/generate_stream", R"({"inputs":"hi","parameters":{"decoder_input_details":true}})");
  EXPECT_EQ(prefill_stream.status, 422) << prefill_stream.body;
  Client::Reply compat_stream = Request("POST", "/", R"({"inputs":"hi","stream":true})");
  ASSERT_EQ(compat_stream.status, 200) << compat_stream.body;
  EXPECT_EQ(Events(compat_stream.body).size(), 2u);

  Client::Reply tokens = Request("POST", "/tokenize", R"({"inputs":"ab"})");
  ASSERT_EQ(tokens.status, 200) << tokens.body;
  EXPECT_EQ(Json::parse(tokens.body)[1]["text"], "b");

  Client::Reply info = Request("GET", "/info", "");
  ASSERT_EQ(info.status, 200);
  EXPECT_EQ(Json::parse(info.body)["model_id"], "bloom-test");
  EXPECT_EQ(Json::parse(info.body)["max_total_tokens"], 2048);
}

TEST_F(GatewayTest, MapsBackendStatusToHttp) {
  StartGateway({});
  struct Case {
    std::string path, body;
    int status;
  };
  auto completion = [](const std::string& prompt, bool stream) {
    return absl::StrCat(R"({"prompt":")", prompt, R"(","stream":)", stream ? "true" : "false", "}");
  };
  auto tgi = [](const std::string& prompt) { return absl::StrCat(R"({"inputs":")", prompt, R"("})"); };
  const Case cases[] = {
      {"/v1/completions", completion("fail:3:bad value", false), 400},
      // The message is no longer read: "too long" without details is a plain 400.
      {"/v1/completions", completion("fail:3:prompt is too long", false), 400},
      {"/v1/completions", completion("fail:11:prompt is too long|text|PROMPT_TOO_LONG", false), 400},
      {"/v1/completions", completion("fail:11:prompt is too long|text|PROMPT_TOO_LONG", true), 400},
      {"/generate", tgi("fail:11:prompt is too long|text|PROMPT_TOO_LONG"), 422},
      {"/generate_stream", tgi("fail:11:prompt is too long|text|PROMPT_TOO_LONG"), 422},
      {"/v1/completions", completion("fail:16:who", false), 401},
      {"/v1/completions", completion("fail:5:no model", false), 404},
      {"/v1/completions", completion("fail:14:draining", true), 503},
      {"/v1/completions", completion("fail:4:late", true), 504},
      {"/v1/completions", completion("fail:13:boom", false), 500},
      {"/generate", tgi("fail:13:boom"), 424},
      {"/generate", tgi("fail:3:bad value"), 422},
      {"/generate_stream", tgi("fail:8:queue full|||1"), 429},
      // RESOURCE_EXHAUSTED without RetryInfo is gRPC's own size limit: retrying cannot help.
      {"/generate", tgi("fail:8:Received message larger than max"), 413},
  };
  for (const Case& c : cases) {
    Client::Reply reply = Request("POST", c.path, c.body);
    EXPECT_EQ(reply.status, c.status) << c.path << " " << c.body;
    Json j = Json::parse(reply.body);
    if (absl::StartsWith(c.path, "/v1/")) {
      EXPECT_TRUE(j["error"].contains("message")) << reply.body;
      EXPECT_TRUE(j["error"].contains("type")) << reply.body;
    } else {
      EXPECT_TRUE(j.contains("error_type")) << reply.body;
    }
  }
  Client::Reply busy =
      Request("POST", "/v1/completions", completion("fail:8:queue full||QUEUE_FULL|2", false));
  EXPECT_EQ(busy.status, 429);
  EXPECT_EQ(busy.headers["retry-after"], "2");  // from the server's RetryInfo
  EXPECT_EQ(Json::parse(busy.body)["error"]["message"], "queue full");
  EXPECT_EQ(Json::parse(busy.body)["error"]["code"], "queue_full");
  Client::Reply loading =
      Request("POST", "/generate", tgi("fail:14:the model is loading||MODEL_LOADING|5"));
  EXPECT_EQ(loading.status, 503);
  EXPECT_EQ(loading.headers["retry-after"], "5");
}

// The server's BadRequest field and ErrorInfo reason become OpenAI's param and code, in the
// route's own field names.
TEST_F(GatewayTest, BackendDetailsFillParamAndCode) {
  StartGateway({});
  Client::Reply completion = Request(
      "POST", "/v1/completions",
      R"({"prompt":"fail:11:prompt is too long|text|PROMPT_TOO_LONG","max_tokens":3})");
  EXPECT_EQ(completion.status, 400);
  Json c = Json::parse(completion.body);
  EXPECT_EQ(c["error"]["param"], "prompt");
  EXPECT_EQ(c["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(c["error"]["message"], "prompt is too long");
  EXPECT_EQ(completion.headers.count("retry-after"), 0u);

  Client::Reply chat = Request(
      "POST", "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"fail:11:prompt is too long|text|PROMPT_TOO_LONG"}]})");
  EXPECT_EQ(chat.status, 400);
  EXPECT_EQ(Json::parse(chat.body)["error"]["param"], "messages");

  Client::Reply max_tokens = Request(
      "POST", "/v1/completions",
      R"({"prompt":"fail:3:too many tokens|stopping.max_new_tokens|CONTEXT_LENGTH_EXCEEDED"})");
  EXPECT_EQ(max_tokens.status, 400);
  EXPECT_EQ(Json::parse(max_tokens.body)["error"]["param"], "max_tokens");

  Client::Reply stops = Request(
      "POST", "/v1/completions",
      R"({"prompt":"fail:3:too many|stopping.stop|TOO_MANY_STOP_SEQUENCES","stream":true})");
  EXPECT_EQ(stops.status, 400);
  EXPECT_EQ(Json::parse(stops.body)["error"]["param"], "stop");
  EXPECT_EQ(Json::parse(stops.body)["error"]["code"], "too_many_stop_sequences");

  // More choices than the server's queue holds: a 400 on n, never a 429 to retry.
  Client::Reply group = Request(
      "POST", "/v1/completions",
      R"({"prompt":"fail:11:too many generations|group_size|GROUP_TOO_LARGE","n":2})");
  EXPECT_EQ(group.status, 400);
  EXPECT_EQ(Json::parse(group.body)["error"]["param"], "n");
  EXPECT_EQ(Json::parse(group.body)["error"]["code"], "group_too_large");
}

TEST_F(GatewayTest, ValidationErrorsNeverReachTheBackend) {
  StartGateway({});
  Client::Reply bad = Request("POST", "/v1/completions", R"({"prompt":"x","n":3,"best_of":2})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Json::parse(bad.body)["error"]["param"], "best_of");
  Client::Reply tgi = Request("POST", "/generate", R"({"inputs":"x","parameters":{"watermark":true}})");
  EXPECT_EQ(tgi.status, 422);
  EXPECT_EQ(Json::parse(tgi.body)["error_type"], "validation");
  Client::Reply json = Request("POST", "/v1/chat/completions", "{not json");
  EXPECT_EQ(json.status, 400);
  EXPECT_EQ(fake_.requests(), 0);
  EXPECT_EQ(Request("GET", "/nope", "").status, 404);
  EXPECT_EQ(Request("GET", "/v1/completions", "").status, 405);
  // /live answers GET and HEAD only (schemathesis found TRACE answered 200).
  EXPECT_EQ(Request("TRACE", "/live", "").status, 405);
  EXPECT_EQ(Request("POST", "/live", "").status, 405);
  EXPECT_EQ(Request("GET", "/live", "").status, 200);
}

// A page in the user's browser can POST text/plain, a form or multipart data to the gateway
// without a CORS preflight: every POST route refuses a present non-JSON Content-Type with 415 in
// its API's shape before reading the body, and no call reaches the backend.
TEST_F(GatewayTest, NonJsonContentTypesGet415BeforeTheBody) {
  StartGateway({});
  const std::vector<std::pair<std::string, std::string>> routes = {
      {"/v1/completions", R"({"prompt":"hi"})"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})"},
      {"/generate", R"({"inputs":"hi"})"},
      {"/generate_stream", R"({"inputs":"hi"})"},
      {"/", R"({"inputs":"hi"})"},
      {"/tokenize", R"({"inputs":"hi"})"},
      {"/detokenize", R"({"tokens":[1]})"}};
  for (const auto& [path, body] : routes) {
    for (const char* type : {"text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                             "multipart/form-data; boundary=x", "text/json", ""}) {
      SCOPED_TRACE(absl::StrCat(path, " with '", type, "'"));
      Client::Reply reply =
          Request("POST", path, body, absl::StrCat("Content-Type: ", type, "\r\n"));
      ASSERT_EQ(reply.status, 415) << reply.body;
      EXPECT_EQ(reply.headers["content-type"], "application/json");
      const Json error = Json::parse(reply.body);
      if (absl::StartsWith(path, "/v1/") || path == "/detokenize") {
        EXPECT_EQ(error["error"]["type"], "invalid_request_error") << reply.body;
        EXPECT_TRUE(absl::StrContains(error["error"]["message"].get<std::string>(),
                                      "Content-Type: application/json"))
            << reply.body;
      } else {
        EXPECT_EQ(error["error_type"], "validation") << reply.body;
        EXPECT_TRUE(absl::StrContains(error["error"].get<std::string>(), "must be JSON"))
            << reply.body;
      }
    }
  }
  EXPECT_EQ(fake_.requests(), 0);
  // JSON (any case, with parameters, or a +json type) and no Content-Type at all still work.
  for (const std::string& header :
       {std::string("Content-Type: application/json\r\n"),
        std::string("Content-Type: Application/JSON; charset=utf-8\r\n"),
        std::string("Content-Type: application/vnd.blossom+json\r\n"), std::string()}) {
    SCOPED_TRACE(header);
    EXPECT_EQ(Request("POST", "/v1/completions", R"({"prompt":"hi"})", header).status, 200);
    EXPECT_EQ(Request("POST", "/generate", R"({"inputs":"hi"})", header).status, 200);
    EXPECT_EQ(Request("POST", "/tokenize", R"({"inputs":"hi"})", header).status, 200);
  }
  // GET routes have no body to read: their Content-Type does not matter.
  EXPECT_EQ(Request("GET", "/v1/models", "", "Content-Type: text/plain\r\n").status, 200);
}

TEST_F(GatewayTest, OversizedBodiesGet413InTheApiShape) {
  StartGateway({});
  const std::string big(5000, 'a');
  Client::Reply openai = Request("POST", "/v1/completions", big);
  EXPECT_EQ(openai.status, 413);
  EXPECT_EQ(Json::parse(openai.body)["error"]["type"], "invalid_request_error");
  Client::Reply tgi = Request("POST", "/generate", big);
  EXPECT_EQ(tgi.status, 413);
  EXPECT_EQ(Json::parse(tgi.body)["error_type"], "validation");
  // A generation route's refusal carries a request id, even one the HTTP server makes itself.
  EXPECT_TRUE(IsAcceptableRequestId(openai.headers["x-request-id"])) << openai.headers.size();
  EXPECT_TRUE(IsAcceptableRequestId(tgi.headers["x-request-id"]));
  EXPECT_NE(openai.headers["x-request-id"], tgi.headers["x-request-id"]);
  // vLLM's /detokenize is OpenAI-shaped, outside /v1/ (and with a query string too).
  for (const char* target : {"/detokenize", "/detokenize?x=1"}) {
    Client::Reply detokenize = Request("POST", target, big);
    EXPECT_EQ(detokenize.status, 413) << target;
    EXPECT_EQ(Json::parse(detokenize.body)["error"]["type"], "invalid_request_error") << target;
    EXPECT_EQ(detokenize.headers.count("x-request-id"), 0u) << "not a generation route";
  }
  EXPECT_EQ(fake_.requests(), 0);
  // Counted under their routes like the gateway's own answers: an operator sees oversized prompts.
  const std::string metrics = Request("GET", "/metrics", "").body;
  for (const char* line :
       {"blossom_gateway_requests_total{route=\"completions\",status=\"413\"} 1",
        "blossom_gateway_requests_total{route=\"generate\",status=\"413\"} 1",
        "blossom_gateway_requests_total{route=\"detokenize\",status=\"413\"} 2"}) {
    EXPECT_TRUE(absl::StrContains(metrics, line)) << line << "\n" << metrics;
  }
}

// A client's X-Request-Id is used only when it is safe in the server's log lines and a header.
TEST(RequestIdTest, OnlyShortVisibleAsciiIdsAreTaken) {
  for (const std::string& id :
       std::vector<std::string>{"a", "0f8fad5b-d9cb-469f-a165-70867728950e",
                                "svc/host:42+x=y@z_w.v",
                                std::string(kMaxClientRequestIdBytes, 'x')}) {
    EXPECT_TRUE(IsAcceptableRequestId(id)) << id;
  }
  for (const std::string& id : {std::string(), std::string(kMaxClientRequestIdBytes + 1, 'x'),
                               std::string("a\r\nrequest_id=forged"), std::string("a\nb"),
                               std::string("a\rb"), std::string("a\"b"), std::string("a'b"),
                               std::string("a b"), std::string("a\tb"), std::string("caf\xc3\xa9"),
                               std::string("a\0b", 3), std::string("a;b"), std::string("a\x7f")}) {
    EXPECT_FALSE(IsAcceptableRequestId(id)) << absl::CHexEscape(id);
  }
}

// The id a request carries to the server, as its X-Request-Id header: the client's (used as the
// backend's request_id and the OpenAI id), or a fresh one when it has none or an unusable one.
TEST_F(GatewayTest, RequestIdsReachTheBackendAndComeBack) {
  GatewayOptions options;
  options.api_keys = auth::ApiKeys({"k"});
  StartGateway(options);
  const std::string auth = "Authorization: Bearer k\r\n";
  struct Case {
    std::string path, body;
    const char* openai_prefix;  // null: a TGI route (no id in the body)
  };
  const std::string chat = R"("messages":[{"role":"user","content":"hi"}])";
  for (const Case& c : std::vector<Case>{
           {"/v1/completions", R"({"prompt":"hi"})", "cmpl-"},
           {"/v1/completions", R"({"prompt":"hi","stream":true})", "cmpl-"},
           {"/v1/chat/completions", "{" + chat + "}", "chatcmpl-"},
           {"/v1/chat/completions", "{" + chat + R"(,"stream":true})", "chatcmpl-"},
           {"/generate", R"({"inputs":"hi"})", nullptr},
           {"/generate_stream", R"({"inputs":"hi"})", nullptr},
           {"/", R"({"inputs":"hi","stream":true})", nullptr}}) {
    SCOPED_TRACE(absl::StrCat(c.path, " ", c.body));
    const bool stream = absl::StrContains(c.body, "\"stream\":true");
    const std::string client_id = "lb-7f3a:req/42+x=@_.";
    for (const std::string& sent :
         {client_id, std::string(kMaxClientRequestIdBytes + 1, 'x'), std::string("two words"),
          std::string("caf\xc3\xa9"), std::string("forged\"quote"), std::string()}) {
      SCOPED_TRACE(absl::CHexEscape(sent));
      Client::Reply reply = Request(
          "POST", c.path, c.body,
          sent.empty() ? auth : absl::StrCat(auth, "X-Request-Id: ", sent, "\r\n"));
      ASSERT_EQ(reply.status, 200) << reply.body;
      const std::string id = reply.headers["x-request-id"];
      EXPECT_TRUE(IsAcceptableRequestId(id)) << absl::CHexEscape(id);
      if (sent == client_id) {
        EXPECT_EQ(id, client_id);
      } else {
        EXPECT_NE(id, sent);  // a fresh one
      }
      EXPECT_EQ(fake_.last_request().request_id(), id);
      if (c.openai_prefix != nullptr) {
        const std::string body_id =
            stream ? Json::parse(Events(reply.body)[0])["id"].get<std::string>()
                   : Json::parse(reply.body)["id"].get<std::string>();
        EXPECT_EQ(body_id, absl::StrCat(c.openai_prefix, id));
      }
    }
  }
  // Two requests without an id get two ids.
  EXPECT_NE(Request("POST", "/generate", R"({"inputs":"hi"})", auth).headers["x-request-id"],
            Request("POST", "/generate", R"({"inputs":"hi"})", auth).headers["x-request-id"]);
}

// Several choices: the backend's ids are the request's with "-k"; refusals carry the id too,
// whoever refuses (the key check, the gateway's validation, the server).
TEST_F(GatewayTest, EveryAnswerOfARequestCarriesItsId) {
  GatewayOptions options;
  options.api_keys = auth::ApiKeys({"k"});
  StartGateway(options);
  const std::string headers = "Authorization: Bearer k\r\nX-Request-Id: trace-1\r\n";
  Client::Reply choices = Request("POST", "/v1/completions", R"({"prompt":"hi","n":2})", headers);
  ASSERT_EQ(choices.status, 200) << choices.body;
  EXPECT_EQ(choices.headers["x-request-id"], "trace-1");
  std::multiset<std::string> ids;
  for (const v1::GenerateRequest& r : fake_.all_requests()) ids.insert(r.request_id());
  EXPECT_EQ(ids, (std::multiset<std::string>{"trace-1-0", "trace-1-1"}));
  Client::Reply beams = Request("POST", "/v1/completions",
                                R"({"prompt":"hi","n":2,"use_beam_search":true})", headers);
  ASSERT_EQ(beams.status, 200) << beams.body;
  EXPECT_EQ(beams.headers["x-request-id"], "trace-1");
  ASSERT_EQ(fake_.beam_requests().size(), 1u);  // one search: its prompt's first choice's id
  EXPECT_EQ(fake_.beam_requests()[0].request_id(), "trace-1-0");

  const std::string no_key = "X-Request-Id: trace-1\r\n";
  using Refusal = std::tuple<std::string, std::string, std::string, int>;  // path, body, headers
  for (const auto& [path, body, with, want] : std::vector<Refusal>{
           {"/v1/completions", R"({"prompt":"hi"})", no_key, 401},
           {"/v1/completions", R"({"prompt":"hi","temperature":-1})", headers, 400},
           {"/generate", R"({"inputs":"fail:8:big"})", headers, 413},  // no retry delay: 413
           {"/generate_stream", R"({"inputs":"fail:14:down"})", headers, 503},
           {"/v1/chat/completions",
            R"({"messages":[{"role":"user","content":"fail:3:no"}],"stream":true})", headers,
            400}}) {
    Client::Reply reply = Request("POST", path, body, with);
    EXPECT_EQ(reply.status, want) << path << " " << reply.body;
    EXPECT_EQ(reply.headers["x-request-id"], "trace-1") << path << " " << body;
  }
  // Routes without a generation have no request id.
  Client::Reply tokens = Request("POST", "/tokenize", R"({"inputs":"ab"})", headers);
  EXPECT_EQ(tokens.headers.count("x-request-id"), 0u);
}

}  // namespace
}  // namespace blossom::gateway
