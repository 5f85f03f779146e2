// What OpenAI and TGI clients receive through the whole gateway (fixture: gateway_test_util.h),
// where it follows vLLM and TGI: top_logprobs in vLLM's order on the wire, usage on every chunk
// (continuous_usage_stats), TGI stream tokens with their logprob (with details), and error labels
// that tell an unknown path from an unknown model.
#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "clients/gateway/gateway.h"
#include "clients/gateway/gateway_test_util.h"
#include "clients/gateway/json_fields.h"
#include "gtest/gtest.h"
#include "server/http/test_client.h"

namespace blossom::gateway {
namespace {

using testing::Client;
using testing::GatewayTest;

// The HTTP body keeps the order the encoder built: the token first, then by probability.
TEST_F(GatewayTest, TopLogprobsReachTheClientInVllmOrder) {
  StartGateway({});
  Client::Reply reply =
      Request("POST", "/v1/completions", R"({"prompt":"hi","max_tokens":2,"logprobs":1})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_TRUE(absl::StrContains(reply.body,
                                R"("top_logprobs":[{"Hel":-0.5,"A":-0.25},{"lo":-0.5,"A":-0.25}])"))
      << reply.body;
}

// continuous_usage_stats: the prompt is counted (Tokenize) before the stream starts, so every
// chunk carries its usage so far; the final chunk has the server's own counts.
TEST_F(GatewayTest, ContinuousUsageStatsCountThePromptFirst) {
  StartGateway({});
  const std::string options =
      R"("stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true})";
  Client::Reply chat = Request(
      "POST", "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"hi"}],)" + options + "}");
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(fake_.tokenize_requests(), 1);
  std::vector<std::string> events = Events(chat.body);
  ASSERT_EQ(events.size(), 5u) << chat.body;  // role, "Hel", "lo" + finish, usage, [DONE]
  const int prompt = static_cast<int>(std::string("User: hi\nAssistant:").size());  // a byte each
  for (int i = 0; i < 2; ++i) {
    const Json usage = Json::parse(events[static_cast<size_t>(i)])["usage"];
    EXPECT_EQ(usage["prompt_tokens"], prompt) << events[static_cast<size_t>(i)];
    EXPECT_EQ(usage["completion_tokens"], i);
    EXPECT_EQ(usage["total_tokens"], prompt + i);
  }
  EXPECT_EQ(Json::parse(events[2])["usage"]["prompt_tokens"], 3);  // the server's final count
  EXPECT_EQ(Json::parse(events[2])["usage"]["completion_tokens"], 2);
  EXPECT_TRUE(Json::parse(events[3])["choices"].empty());
  EXPECT_EQ(events[4], "[DONE]");

  // A token-id prompt counts itself; a prompt's choices share one count.
  Client::Reply ids = Request("POST", "/v1/completions",
                              R"({"prompt":[[1,2,3,4],[5]],"n":2,)" + options + "}");
  ASSERT_EQ(ids.status, 200) << ids.body;
  EXPECT_EQ(fake_.tokenize_requests(), 1) << "token ids need no Tokenize";
  Client::Reply texts = Request("POST", "/v1/completions",
                                R"({"prompt":["ab","abc"],"n":2,)" + options + "}");
  ASSERT_EQ(texts.status, 200) << texts.body;
  EXPECT_EQ(fake_.tokenize_requests(), 3) << "one per prompt, not per choice";
  for (const std::string& event : Events(texts.body)) {
    if (event == "[DONE]") continue;
    const Json chunk = Json::parse(event);
    if (chunk["choices"].empty() || !chunk["choices"][0]["finish_reason"].is_null()) continue;
    const int index = chunk["choices"][0]["index"];
    EXPECT_EQ(chunk["usage"]["prompt_tokens"], index < 2 ? 2 : 3) << event;
  }

  // A count that fails answers the request (and ends it: no call is left).
  Client::Reply failed = Request("POST", "/v1/completions",
                                 R"({"prompt":"fail:3:no count",)" + options + "}");
  EXPECT_EQ(failed.status, 400) << failed.body;
  EXPECT_TRUE(absl::StrContains(failed.body, "no count")) << failed.body;
  for (int i = 0; i < 100 && gateway_->pending_calls() > 0; ++i) {  // ends just after the answer
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(gateway_->pending_calls(), 0);
}

// TGI's stream events carry each token's logprob as a number with details; without, the server
// is not asked (the CUDA backend would sample those rows on the host) and it is null.
TEST_F(GatewayTest, TgiStreamTokensHaveALogprobWithDetails) {
  StartGateway({});
  Client::Reply stream =
      Request("POST", "/generate_stream", R"({"inputs":"hi","parameters":{"details":true}})");
  ASSERT_EQ(stream.status, 200) << stream.body;
  ASSERT_TRUE(fake_.last_request().sampling().has_logprobs());
  EXPECT_EQ(fake_.last_request().sampling().logprobs(), 0) << "the chosen token's only";
  for (const std::string& event : Events(stream.body)) {
    EXPECT_TRUE(Json::parse(event)["token"]["logprob"].is_number()) << event;
  }
  Client::Reply plain = Request("POST", "/generate_stream", R"({"inputs":"hi"})");
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_FALSE(fake_.last_request().sampling().has_logprobs());
}

// An unknown path is not an unknown model, and no 4xx is a server_error.
TEST_F(GatewayTest, ErrorLabelsSayWhatWasNotFound) {
  GatewayOptions options;
  options.served_model_name = "bloom";
  StartGateway(options);
  Client::Reply route = Request("POST", "/v1/nope", "{}");
  ASSERT_EQ(route.status, 404);
  const Json r = Json::parse(route.body)["error"];
  EXPECT_EQ(r["type"], "invalid_request_error");
  EXPECT_TRUE(r["code"].is_null()) << route.body;
  EXPECT_TRUE(absl::StrContains(r["message"].get<std::string>(), "POST /v1/nope")) << route.body;

  for (const auto& [method, path, body] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"POST", "/v1/completions", R"({"prompt":"hi","model":"other"})"},
           {"GET", "/v1/models/other", ""}}) {
    Client::Reply model = Request(method, path, body);
    ASSERT_EQ(model.status, 404) << path;
    const Json m = Json::parse(model.body)["error"];
    EXPECT_EQ(m["code"], "model_not_found") << path;
    EXPECT_EQ(m["param"], "model") << path;
  }

  Client::Reply wrong_method = Request("GET", "/v1/completions", "");
  ASSERT_EQ(wrong_method.status, 405);
  EXPECT_EQ(Json::parse(wrong_method.body)["error"]["type"], "invalid_request_error");
}

// Without --served_model_name the responses name the backend's model once the gateway has asked
// for it, which the first completion does: a soak found "blossom" in every response until a
// client happened to call /v1/models.
TEST_F(GatewayTest, ResponsesNameTheBackendsModelWithoutAModelsCall) {
  StartGateway({});
  std::string model;
  for (int i = 0; i < 100 && model != "bloom-test"; ++i) {
    Client::Reply reply = Request("POST", "/v1/completions", R"({"prompt":"hi","max_tokens":1})");
    ASSERT_EQ(reply.status, 200) << reply.body;
    model = Json::parse(reply.body)["model"].get<std::string>();
    if (model != "bloom-test") std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(model, "bloom-test");
}

// /v1/models answers vLLM's ModelCard in vLLM's field order.
TEST_F(GatewayTest, ModelsListsVllmsModelCardInOrder) {
  StartGateway({});
  Client::Reply reply = Request("GET", "/v1/models", "");
  ASSERT_EQ(reply.status, 200) << reply.body;
  const std::vector<std::string> keys = {"\"object\":\"list\"", "\"data\"", "\"id\"",
                                         "\"object\":\"model\"", "\"created\"", "\"owned_by\"",
                                         "\"root\"", "\"parent\":null", "\"max_model_len\""};
  size_t at = 0;
  for (const std::string& key : keys) {
    const size_t found = reply.body.find(key, at);
    ASSERT_NE(found, std::string::npos) << key << " after byte " << at << ": " << reply.body;
    at = found;
  }
}

}  // namespace
}  // namespace blossom::gateway
