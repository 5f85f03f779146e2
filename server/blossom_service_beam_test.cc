// BeamSearch over gRPC with the CPU backend and the 4-head fixture model: the beams of
// Hugging Face's generate(num_beams=...) (tests/fixtures/goldens/bloom-tiny-h4/beam_search.json),
// refusals naming the field, cancellation, logprobs and the one-request metrics.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/blossom_service.h"
#include "server/blossom_service_test_util.h"
#include "server/grpc_status.h"
#include "server/status_details.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

using testing::ServiceFixture;

nlohmann::json Goldens() {
  std::ifstream in(FixturePath("goldens/bloom-tiny-h4/beam_search.json"));
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str(), nullptr, false);
}

// A golden case as the wire request: EOS (2) is the model's, any other end token a stop id.
v1::BeamSearchRequest FromGolden(const nlohmann::json& c) {
  v1::BeamSearchRequest r;
  for (int32_t id : c["prompt_ids"].get<std::vector<int32_t>>()) r.mutable_token_ids()->add_ids(id);
  r.set_beam_width(c["num_beams"].get<int32_t>());
  r.set_num_return_sequences(c["num_return_sequences"].get<int32_t>());
  r.set_length_penalty(c["length_penalty"].get<double>());
  const nlohmann::json& early = c["early_stopping"];
  r.set_early_stopping(early.is_string()   ? v1::EARLY_STOPPING_NEVER
                       : early.get<bool>() ? v1::EARLY_STOPPING_WHEN_FULL
                                           : v1::EARLY_STOPPING_HEURISTIC);
  r.mutable_stopping()->set_max_new_tokens(c["max_new_tokens"].get<int32_t>());
  r.mutable_stopping()->set_min_new_tokens(c["min_new_tokens"].get<int32_t>());
  const auto ends = c["end_token_ids"].get<std::vector<int32_t>>();
  bool eos = false;
  for (int32_t id : ends) {
    if (id == 2) {
      eos = true;
    } else {
      r.mutable_stopping()->add_stop_token_ids(id);
    }
  }
  r.mutable_stopping()->set_ignore_eos(!eos);
  return r;
}

TEST(BlossomServiceBeamTest, BeamsAreHuggingFaces) {
  const nlohmann::json golden = Goldens();
  ASSERT_FALSE(golden.is_discarded());
  ServiceFixture fixture;
  fixture.Load();
  int checked = 0;
  for (const nlohmann::json& c : golden["cases"]) {
    SCOPED_TRACE(::testing::Message() << "case " << checked);
    grpc::ClientContext context;
    v1::BeamSearchResponse response;
    v1::BeamSearchRequest request = FromGolden(c);
    request.set_logprobs(true);
    grpc::Status status = fixture.stub().BeamSearch(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    const auto& sequences = c["sequences"];
    ASSERT_EQ(response.beams_size(), static_cast<int>(sequences.size()));
    int generated = 0;
    for (int i = 0; i < response.beams_size(); ++i) {
      const v1::Beam& beam = response.beams(i);
      std::vector<int32_t> want = sequences[i].get<std::vector<int32_t>>();
      std::vector<int32_t> got;
      float sum = 0.0f;
      for (const v1::Token& t : beam.tokens()) {
        got.push_back(t.id());
        ASSERT_TRUE(t.has_logprob());
        sum += t.logprob();
      }
      generated += beam.tokens_size();
      const bool ended = beam.finish_reason() != v1::FINISH_REASON_LENGTH;
      const auto& stop_ids = request.stopping().stop_token_ids();
      if (ended) {
        ASSERT_FALSE(got.empty());
        EXPECT_TRUE(got.back() == 2 ? beam.finish_reason() == v1::FINISH_REASON_EOS_TOKEN
                                    : beam.finish_reason() == v1::FINISH_REASON_STOP_TOKEN &&
                                          std::count(stop_ids.begin(), stop_ids.end(), got.back()));
        want.back() = got.back();  // HF shows end_token_ids[0] whichever end token it was
      } else {
        EXPECT_EQ(static_cast<int>(got.size()), c["max_new_tokens"].get<int>());
      }
      EXPECT_EQ(got, want) << "beam " << i;
      EXPECT_NEAR(beam.cumulative_logprob(), sum, 1e-4);
      // 1e-5 a token in the sum (engine/serving:beam_search_test), divided by the penalty.
      const double n = static_cast<double>(got.size());
      EXPECT_NEAR(beam.score(), c["scores"][i].get<double>(),
                  1e-5 * std::pow(n, 1.0 - c["length_penalty"].get<double>()));
    }
    EXPECT_EQ(response.usage().generated_tokens(), generated);
    EXPECT_EQ(response.usage().prompt_tokens(), request.token_ids().ids_size());
    EXPECT_GE(response.steps(), 1);
    EXPECT_FALSE(response.system_fingerprint().empty());
    ++checked;
  }
  EXPECT_EQ(checked, 21);
  EXPECT_EQ(fixture.engine().num_unfinished(), 0);
  // Each search is one request in the metrics, however many rounds it took.
  const std::string metrics = fixture.registry().Render();
  EXPECT_NE(metrics.find("blossom_requests_total{model_name=\"bloom-tiny-h4\",outcome=\"finished\"} 21"),
            std::string::npos)
      << metrics;
}

TEST(BlossomServiceBeamTest, TextLeavesTheEndTokenOutUnlessAsked) {
  ServiceFixture fixture;
  fixture.Load();
  // The first golden case with a beam that a stop token (not EOS) finished.
  int checked = 0;
  const nlohmann::json golden = Goldens();
  for (const nlohmann::json& c : golden["cases"]) {
    v1::BeamSearchRequest request = FromGolden(c);
    for (bool include : {false, true}) {
      request.mutable_stopping()->set_include_stop_in_output(include);
      grpc::ClientContext context;
      v1::BeamSearchResponse response;
      ASSERT_TRUE(fixture.stub().BeamSearch(&context, request, &response).ok());
      for (const v1::Beam& beam : response.beams()) {
        if (beam.finish_reason() != v1::FINISH_REASON_STOP_TOKEN) continue;
        std::string text_without_end;
        for (int i = 0; i + 1 < beam.tokens_size(); ++i) text_without_end += beam.tokens(i).text();
        const std::string end_text = beam.tokens(beam.tokens_size() - 1).text();
        ASSERT_FALSE(end_text.empty());
        EXPECT_EQ(beam.text(), include ? text_without_end + end_text : text_without_end);
        EXPECT_FALSE(beam.tokens(0).has_logprob());  // logprobs not asked
        ++checked;
        break;
      }
    }
    if (checked > 0) break;
  }
  EXPECT_EQ(checked, 2) << "no golden case has a beam a stop token finished";
}

TEST(BlossomServiceBeamTest, RefusalsNameTheField) {
  ServiceFixture fixture;
  fixture.Load();
  struct Case {
    std::function<void(v1::BeamSearchRequest*)> edit;
    std::string field, reason;
  };
  const std::vector<Case> cases = {
      {[](v1::BeamSearchRequest* r) { r->set_beam_width(0); }, "beam_width",
       "INVALID_BEAM_SEARCH_PARAMS"},
      {[](v1::BeamSearchRequest* r) { r->set_beam_width(11); }, "beam_width",
       "INVALID_BEAM_SEARCH_PARAMS"},
      {[](v1::BeamSearchRequest* r) {
         r->set_beam_width(7);
         r->mutable_stopping()->add_stop_token_ids(5);
       },
       "stopping.stop_token_ids", "INVALID_BEAM_SEARCH_PARAMS"},  // 7 x (1 + 2) > 20
      {[](v1::BeamSearchRequest* r) { r->set_length_penalty(11); }, "length_penalty",
       "INVALID_BEAM_SEARCH_PARAMS"},
      {[](v1::BeamSearchRequest* r) { r->set_num_return_sequences(5); }, "num_return_sequences",
       "INVALID_BEAM_SEARCH_PARAMS"},
      {[](v1::BeamSearchRequest* r) { r->set_length_penalty(NAN); }, "length_penalty",
       "INVALID_BEAM_SEARCH_PARAMS"},
      {[](v1::BeamSearchRequest* r) { r->set_early_stopping(static_cast<v1::EarlyStopping>(7)); },
       "early_stopping", "INVALID_BEAM_SEARCH_PARAMS"},
      {[](v1::BeamSearchRequest* r) { r->mutable_stopping()->add_stop("."); }, "stopping.stop",
       "INVALID_BEAM_SEARCH_PARAMS"},
      {[](v1::BeamSearchRequest* r) { r->mutable_stopping()->set_max_new_tokens(0); },
       "stopping.max_new_tokens", "INVALID_STOPPING_PARAMS"},
      {[](v1::BeamSearchRequest* r) { r->mutable_stopping()->set_min_new_tokens(9); },
       "stopping.min_new_tokens", "INVALID_STOPPING_PARAMS"},
      {[](v1::BeamSearchRequest* r) { r->mutable_stopping()->add_stop_token_ids(99999); },
       "stopping.stop_token_ids", "INVALID_STOPPING_PARAMS"},
      {[](v1::BeamSearchRequest* r) { r->mutable_stopping()->set_max_new_tokens(100000); },
       "stopping.max_new_tokens", "CONTEXT_LENGTH_EXCEEDED"},
      // Past the context and past what the queue holds: the context, as Generate says (a
      // narrower search could never fit either).
      {[](v1::BeamSearchRequest* r) {
         r->set_beam_width(1);
         r->mutable_stopping()->set_max_new_tokens(2147483647);
       },
       "stopping.max_new_tokens", "CONTEXT_LENGTH_EXCEEDED"},
      {[](v1::BeamSearchRequest* r) {
         r->clear_text();
         r->mutable_token_ids()->add_ids(999999);
       },
       "token_ids", "INVALID_PROMPT"},
      {[](v1::BeamSearchRequest* r) { r->clear_text(); }, "prompt", "INVALID_PROMPT"},
      {[](v1::BeamSearchRequest* r) { r->set_model("gpt-9"); }, "model", "UNKNOWN_MODEL"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    v1::BeamSearchRequest request;
    request.set_text("Hello");
    request.set_beam_width(4);
    request.mutable_stopping()->set_max_new_tokens(8);
    cases[i].edit(&request);
    grpc::ClientContext context;
    v1::BeamSearchResponse response;
    grpc::Status status = fixture.stub().BeamSearch(&context, request, &response);
    EXPECT_FALSE(status.ok()) << "case " << i;
    EXPECT_NE(status.error_code(), grpc::StatusCode::UNAVAILABLE) << "case " << i;
    const StatusDetails details = DetailsOf(FromGrpcStatus(status));
    EXPECT_EQ(details.field, cases[i].field) << "case " << i << ": " << status.error_message();
    EXPECT_EQ(details.reason, cases[i].reason) << "case " << i << ": " << status.error_message();
    EXPECT_FALSE(details.retry_delay.has_value()) << "case " << i;
  }
  EXPECT_EQ(fixture.engine().num_unfinished(), 0);
}

// A search whose widest round could never fit the waiting queue's tokens is refused for good,
// naming beam_width (not a context-length error: the context fits).
TEST(BlossomServiceBeamTest, ARoundTheQueueCanNeverHoldIsRefusedNamingBeamWidth) {
  EngineConfig engine_config;
  engine_config.scheduler.max_waiting_prompt_tokens = 100;
  ServiceFixture fixture({}, engine_config);
  fixture.Load();
  v1::BeamSearchRequest request;
  for (int i = 0; i < 20; ++i) request.mutable_token_ids()->add_ids(10 + i);
  request.set_beam_width(4);
  request.mutable_stopping()->set_max_new_tokens(8);  // 4 x (20 + 8) = 112 > 100
  grpc::ClientContext context;
  v1::BeamSearchResponse response;
  grpc::Status status = fixture.stub().BeamSearch(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  const StatusDetails details = DetailsOf(FromGrpcStatus(status));
  EXPECT_EQ(details.field, "beam_width") << status.error_message();
  EXPECT_EQ(details.reason, "INVALID_BEAM_SEARCH_PARAMS") << status.error_message();
  EXPECT_NE(status.error_message().find("112 tokens"), std::string::npos) << status.error_message();
  // Narrower, it runs.
  request.set_beam_width(3);  // 84
  grpc::ClientContext again;
  EXPECT_TRUE(fixture.stub().BeamSearch(&again, request, &response).ok());
}

// A gateway's prompts x beam_width searches run at once: a group the queue could never hold
// is refused for good (no RetryInfo, so no client retries it), one it can hold is served.
TEST(BlossomServiceBeamTest, AGroupLargerThanTheQueueIsOutOfRange) {
  EngineConfig engine_config;
  engine_config.scheduler.max_waiting_requests = 4;
  ServiceFixture fixture({}, engine_config);
  fixture.Load();
  v1::BeamSearchRequest request;
  request.set_text("Hello");
  request.set_beam_width(2);
  request.mutable_stopping()->set_max_new_tokens(3);
  request.set_group_size(6);  // three prompts x 2 beams; each search alone fits
  grpc::ClientContext refused_context;
  v1::BeamSearchResponse response;
  grpc::Status status = fixture.stub().BeamSearch(&refused_context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OUT_OF_RANGE) << status.error_message();
  StatusDetails details = DetailsOf(FromGrpcStatus(status));
  EXPECT_EQ(details.reason, "GROUP_TOO_LARGE");
  EXPECT_EQ(details.field, "group_size");
  EXPECT_FALSE(details.retry_delay.has_value());
  for (int32_t group : {-1, 1}) {  // negative; smaller than the search's own beams
    request.set_group_size(group);
    grpc::ClientContext context;
    status = fixture.stub().BeamSearch(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << group;
    details = DetailsOf(FromGrpcStatus(status));
    EXPECT_EQ(details.field, "group_size") << status.error_message();
    EXPECT_EQ(details.reason, group < 0 ? "INVALID_REQUEST" : "INVALID_BEAM_SEARCH_PARAMS");
    EXPECT_FALSE(details.retry_delay.has_value());
  }
  request.set_group_size(4);
  grpc::ClientContext served_context;
  status = fixture.stub().BeamSearch(&served_context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.beams_size(), 2);
  EXPECT_EQ(fixture.engine().num_unfinished(), 0);
}

TEST(BlossomServiceBeamTest, ADeadlineCancelsTheSearchInTheEngine) {
  ServiceFixture fixture;
  fixture.Load();
  v1::BeamSearchRequest request;
  for (int i = 0; i < 60; ++i) request.mutable_token_ids()->add_ids(10 + i * 7);
  request.set_beam_width(4);
  request.mutable_stopping()->set_max_new_tokens(1500);
  request.mutable_stopping()->set_ignore_eos(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  v1::BeamSearchResponse response;
  grpc::Status status = fixture.stub().BeamSearch(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (fixture.engine().num_unfinished() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(fixture.engine().num_unfinished(), 0);
  EXPECT_EQ(fixture.engine().scheduler_stats().blocks_used, 0);
}

}  // namespace
}  // namespace blossom
