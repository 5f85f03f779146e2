#include "server/beam_search_convert.h"

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/status_details.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

constexpr int32_t kVocab = 2048;
constexpr int32_t kEos = 2;

class BeamSearchConvertTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tokenizer = Tokenizer::FromFile(FixturePath("tokenizer/tokenizer.json"));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = tokenizer->release();
  }
  static void TearDownTestSuite() { delete tokenizer_; }

  static v1::BeamSearchRequest Request() {
    v1::BeamSearchRequest r;
    r.mutable_token_ids()->add_ids(5);
    r.mutable_token_ids()->add_ids(6);
    r.set_beam_width(3);
    return r;
  }

  static Tokenizer* tokenizer_;
  RequestLimits limits_{/*max_input_tokens=*/64, /*served_model_name=*/"tiny",
                        /*max_total_tokens=*/100};
};
Tokenizer* BeamSearchConvertTest::tokenizer_ = nullptr;

TEST_F(BeamSearchConvertTest, DefaultsAndEndTokens) {
  v1::BeamSearchRequest r = Request();
  r.mutable_stopping()->set_max_new_tokens(7);
  auto converted = ToBeamSearch(r, *tokenizer_, limits_, {kEos}, kVocab);
  ASSERT_TRUE(converted.ok()) << converted.status();
  const BeamSearchParams& p = converted->search.params;
  EXPECT_EQ(converted->search.prompt_tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(p.beam_width, 3);
  EXPECT_EQ(p.num_return_sequences, 3);  // all the beams, as vLLM returns n of n
  EXPECT_EQ(p.length_penalty, 1.0);
  EXPECT_EQ(p.early_stopping, EarlyStopping::kHeuristic);
  EXPECT_EQ(p.max_new_tokens, 7);
  EXPECT_EQ(p.end_tokens, (std::vector<int32_t>{kEos}));

  // Stop ids join EOS once each; ignore_eos drops EOS; max_new_tokens_to_limit fills the cap.
  r.mutable_stopping()->add_stop_token_ids(9);
  r.mutable_stopping()->add_stop_token_ids(kEos);
  r.set_num_return_sequences(2);
  r.set_length_penalty(-0.5);
  r.set_early_stopping(v1::EARLY_STOPPING_NEVER);
  converted = ToBeamSearch(r, *tokenizer_, limits_, {kEos}, kVocab);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->search.params.end_tokens, (std::vector<int32_t>{kEos, 9}));
  EXPECT_EQ(converted->search.params.num_return_sequences, 2);
  EXPECT_EQ(converted->search.params.length_penalty, -0.5);
  EXPECT_EQ(converted->search.params.early_stopping, EarlyStopping::kNever);
  r.mutable_stopping()->set_ignore_eos(true);
  r.mutable_stopping()->set_max_new_tokens_to_limit(true);
  r.mutable_stopping()->clear_max_new_tokens();
  converted = ToBeamSearch(r, *tokenizer_, limits_, {kEos}, kVocab);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->search.params.end_tokens, (std::vector<int32_t>{9, kEos}));
  EXPECT_EQ(converted->search.params.max_new_tokens, 98);
  // A model without EOS: only the stop ids end beams.
  r.mutable_stopping()->set_ignore_eos(false);
  r.mutable_stopping()->clear_stop_token_ids();
  converted = ToBeamSearch(r, *tokenizer_, limits_, {}, kVocab);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_TRUE(converted->search.params.end_tokens.empty());
}

// A model with several end tokens (a chat fine-tune's end of turn beside EOS): each ends a beam
// as EOS, as it ends a generation, unless ignore_eos.
TEST_F(BeamSearchConvertTest, EveryModelEndTokenEndsABeamAsEos) {
  const std::vector<int32_t> ends = {kEos, 9, 7};
  v1::BeamSearchRequest r = Request();
  r.mutable_stopping()->set_max_new_tokens(4);
  r.mutable_stopping()->add_stop_token_ids(9);
  r.mutable_stopping()->add_stop_token_ids(11);
  auto converted = ToBeamSearch(r, *tokenizer_, limits_, ends, kVocab);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->search.params.end_tokens, (std::vector<int32_t>{kEos, 9, 7, 11}));

  const std::vector<int32_t> words = tokenizer_->Encode("Hello world").value();
  auto ended_by = [&](int32_t last) {
    BeamHypothesis h;
    h.tokens = words;
    h.tokens.push_back(last);
    h.logprobs.assign(h.tokens.size(), -0.5f);
    h.ended_by_end_token = true;
    return h;
  };
  BeamSearchOutcome outcome;
  outcome.beams = {ended_by(9), ended_by(7), ended_by(11)};
  v1::BeamSearchResponse response;
  FillBeamSearchResponse(outcome, r, *converted, ends, *tokenizer_, &response);
  ASSERT_EQ(response.beams_size(), 3);
  EXPECT_EQ(response.beams(0).finish_reason(), v1::FINISH_REASON_EOS_TOKEN);  // listed too
  EXPECT_EQ(response.beams(1).finish_reason(), v1::FINISH_REASON_EOS_TOKEN);
  EXPECT_EQ(response.beams(2).finish_reason(), v1::FINISH_REASON_STOP_TOKEN);
  for (const v1::Beam& b : response.beams()) EXPECT_EQ(b.text(), "Hello world");

  // ignore_eos: only the client's stop ids end beams, as stop tokens.
  r.mutable_stopping()->set_ignore_eos(true);
  converted = ToBeamSearch(r, *tokenizer_, limits_, ends, kVocab);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->search.params.end_tokens, (std::vector<int32_t>{9, 11}));
  outcome.beams = {ended_by(9), ended_by(11)};
  response.Clear();
  FillBeamSearchResponse(outcome, r, *converted, ends, *tokenizer_, &response);
  ASSERT_EQ(response.beams_size(), 2);
  EXPECT_EQ(response.beams(0).finish_reason(), v1::FINISH_REASON_STOP_TOKEN);
  EXPECT_EQ(response.beams(1).finish_reason(), v1::FINISH_REASON_STOP_TOKEN);

  // The model's end tokens count among each beam's candidates: 5 x (1 + 3) = 20 fits; a wider
  // search is refused naming beam_width, a stop id more naming stop_token_ids.
  r = Request();
  r.mutable_stopping()->set_max_new_tokens(4);
  r.set_beam_width(5);
  EXPECT_TRUE(ToBeamSearch(r, *tokenizer_, limits_, ends, kVocab).ok());
  r.set_beam_width(6);
  EXPECT_EQ(DetailsOf(ToBeamSearch(r, *tokenizer_, limits_, ends, kVocab).status()).field,
            "beam_width");
  r.set_beam_width(5);
  r.mutable_stopping()->add_stop_token_ids(11);
  EXPECT_EQ(DetailsOf(ToBeamSearch(r, *tokenizer_, limits_, ends, kVocab).status()).field,
            "stopping.stop_token_ids");
}

TEST_F(BeamSearchConvertTest, AsGenerateRequestKeepsWhatAGenerationChecks) {
  v1::BeamSearchRequest r = Request();
  r.set_text("Hello");  // replaces the ids (oneof)
  r.set_model("tiny");
  r.set_request_id("abc");
  r.set_priority(3);
  r.set_truncate_prompt_tokens(5);
  r.set_return_prompt_tokens(true);
  r.mutable_stopping()->set_min_new_tokens(2);
  const v1::GenerateRequest g = AsGenerateRequest(r);
  EXPECT_EQ(g.text(), "Hello");
  EXPECT_EQ(g.model(), "tiny");
  EXPECT_EQ(g.request_id(), "abc");
  EXPECT_EQ(g.priority(), 3);
  EXPECT_EQ(g.truncate_prompt_tokens(), 5);
  EXPECT_TRUE(g.return_prompt_tokens());
  EXPECT_EQ(g.stopping().min_new_tokens(), 2);
  EXPECT_EQ(g.sampling().temperature(), 0.0f);
}

TEST_F(BeamSearchConvertTest, ResponseTextFinishReasonsAndUsage) {
  v1::BeamSearchRequest r = Request();
  r.mutable_stopping()->set_max_new_tokens(4);
  r.mutable_stopping()->add_stop_token_ids(9);
  auto converted = ToBeamSearch(r, *tokenizer_, limits_, {kEos}, kVocab);
  ASSERT_TRUE(converted.ok());
  const std::vector<int32_t> words = tokenizer_->Encode("Hello world").value();
  ASSERT_GE(words.size(), 2u);
  BeamSearchOutcome outcome;
  outcome.prompt_tokens = 2;
  outcome.rounds = 4;
  outcome.cached_tokens = 170;  // every round's hits: not the prompt's
  outcome.cached_prompt_tokens = 17;
  auto beam = [&](int32_t last, bool ended, double score) {
    BeamHypothesis h;
    h.tokens = words;
    if (last >= 0) h.tokens.push_back(last);
    h.logprobs.assign(h.tokens.size(), -0.5f);
    h.cumulative_logprob = -0.5f * h.tokens.size();
    h.score = score;
    h.ended_by_end_token = ended;
    return h;
  };
  outcome.beams = {beam(kEos, true, -0.1), beam(9, true, -0.2), beam(-1, false, -0.3)};
  v1::BeamSearchResponse response;
  FillBeamSearchResponse(outcome, r, *converted, {kEos}, *tokenizer_, &response);
  ASSERT_EQ(response.beams_size(), 3);
  EXPECT_EQ(response.beams(0).finish_reason(), v1::FINISH_REASON_EOS_TOKEN);
  EXPECT_EQ(response.beams(1).finish_reason(), v1::FINISH_REASON_STOP_TOKEN);
  EXPECT_EQ(response.beams(2).finish_reason(), v1::FINISH_REASON_LENGTH);
  for (const v1::Beam& b : response.beams()) {
    EXPECT_EQ(b.text(), "Hello world");  // the end token's text left out
    EXPECT_FALSE(b.tokens(0).has_logprob());
  }
  EXPECT_EQ(response.beams(0).tokens_size(), static_cast<int>(words.size()) + 1);
  EXPECT_DOUBLE_EQ(response.beams(1).score(), -0.2);
  EXPECT_EQ(response.usage().prompt_tokens(), 2);
  EXPECT_EQ(response.usage().generated_tokens(), static_cast<int>(3 * words.size() + 2));
  EXPECT_EQ(response.usage().cached_prompt_tokens(), 17);
  EXPECT_EQ(response.steps(), 4);
  EXPECT_TRUE(response.prompt_token_ids().empty());

  r.set_logprobs(true);
  r.set_return_prompt_tokens(true);
  response.Clear();
  FillBeamSearchResponse(outcome, r, *converted, {kEos}, *tokenizer_, &response);
  EXPECT_FLOAT_EQ(response.beams(0).tokens(0).logprob(), -0.5f);
  EXPECT_EQ(response.prompt_token_ids_size(), 2);
}

TEST_F(BeamSearchConvertTest, RefusalsNameTheField) {
  struct Case {
    std::function<void(v1::BeamSearchRequest*)> edit;
    std::string field, reason;
  };
  const std::vector<Case> cases = {
      {[](v1::BeamSearchRequest* r) { r->set_beam_width(-1); }, "beam_width",
       error_reason::kInvalidBeamSearchParams},
      {[](v1::BeamSearchRequest* r) {
         r->set_beam_width(10);
         r->mutable_stopping()->set_ignore_eos(true);
       },
       "", ""},  // 10 beams x 2 candidates: the most there is
      {[](v1::BeamSearchRequest* r) { r->set_beam_width(10); }, "", ""},  // with EOS: 10 x 2
      {[](v1::BeamSearchRequest* r) { r->set_num_return_sequences(0); }, "num_return_sequences",
       error_reason::kInvalidBeamSearchParams},
      {[](v1::BeamSearchRequest* r) { r->set_length_penalty(INFINITY); }, "length_penalty",
       error_reason::kInvalidBeamSearchParams},
      {[](v1::BeamSearchRequest* r) { r->mutable_stopping()->add_stop("x"); }, "stopping.stop",
       error_reason::kInvalidBeamSearchParams},
      {[](v1::BeamSearchRequest* r) { r->mutable_stopping()->add_stop_token_ids(-3); },
       "stopping.stop_token_ids", error_reason::kInvalidStoppingParams},
      {[](v1::BeamSearchRequest* r) {
         r->set_beam_width(7);
         r->mutable_stopping()->add_stop_token_ids(9);
       },
       "stopping.stop_token_ids", error_reason::kInvalidBeamSearchParams},  // 7 x (1 + 2) = 21
      {[](v1::BeamSearchRequest* r) { r->set_model("other"); }, "model",
       error_reason::kUnknownModel},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    v1::BeamSearchRequest r = Request();
    r.mutable_stopping()->set_max_new_tokens(4);
    cases[i].edit(&r);
    auto converted = ToBeamSearch(r, *tokenizer_, limits_, {kEos}, kVocab);
    if (cases[i].field.empty()) {
      EXPECT_TRUE(converted.ok()) << "case " << i << ": " << converted.status();
      continue;
    }
    ASSERT_FALSE(converted.ok()) << "case " << i;
    const StatusDetails details = DetailsOf(converted.status());
    EXPECT_EQ(details.field, cases[i].field) << "case " << i << ": " << converted.status();
    EXPECT_EQ(details.reason, cases[i].reason) << "case " << i;
  }
}

// A request's searches run together (a gateway's prompts x beam_width): a group the waiting
// queue could never hold is refused for good, as GenerateRequest's; the group covers the
// search's own beams.
TEST_F(BeamSearchConvertTest, GroupSizeIsCheckedAgainstTheQueueAndTheWidth) {
  RequestLimits limits = limits_;
  limits.max_waiting_requests = 6;
  v1::BeamSearchRequest r = Request();  // beam_width 3
  r.mutable_stopping()->set_max_new_tokens(4);
  for (int32_t group : {0, 3, 6}) {
    r.set_group_size(group);
    EXPECT_TRUE(ToBeamSearch(r, *tokenizer_, limits, {kEos}, kVocab).ok())
        << "group_size " << group;
  }
  r.set_group_size(7);
  absl::Status refused = ToBeamSearch(r, *tokenizer_, limits, {kEos}, kVocab).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kOutOfRange) << refused;
  EXPECT_NE(refused.message().find("7 beams at once"), absl::string_view::npos) << refused;
  EXPECT_NE(refused.message().find("max_waiting_requests 6"), absl::string_view::npos) << refused;
  EXPECT_EQ(DetailsOf(refused).field, "group_size");
  EXPECT_EQ(DetailsOf(refused).reason, error_reason::kGroupTooLarge);
  EXPECT_FALSE(DetailsOf(refused).retry_delay.has_value());
  for (int32_t group : {-1, 1, 2}) {
    r.set_group_size(group);
    refused = ToBeamSearch(r, *tokenizer_, limits, {kEos}, kVocab).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << "group_size " << group;
    EXPECT_EQ(DetailsOf(refused).field, "group_size") << refused;
  }
}

}  // namespace
}  // namespace blossom
