#include "server/request_convert.h"

#include <chrono>
#include <thread>

#include "absl/synchronization/notification.h"
#include "engine/guided/constraint_cache.h"
#include "engine/guided/token_vocabulary.h"
#include "gtest/gtest.h"
#include "server/status_details.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

class RequestConvertTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tokenizer = Tokenizer::FromFile(FixturePath("tokenizer/tokenizer.json"));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = tokenizer->release();
  }
  static Tokenizer* tokenizer_;
  RequestLimits limits_{/*max_input_tokens=*/8, /*served_model_name=*/"tiny"};
};
Tokenizer* RequestConvertTest::tokenizer_ = nullptr;

TEST_F(RequestConvertTest, TextPromptIsTokenizedAndAbsentFieldsKeepEngineDefaults) {
  v1::GenerateRequest request;
  request.set_text("The server reads");
  auto converted = ToEngineRequest(request, *tokenizer_, limits_);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->prompt_tokens, *tokenizer_->Encode("The server reads"));
  const SamplingParams defaults;
  EXPECT_EQ(converted->sampling.temperature, defaults.temperature);
  EXPECT_EQ(converted->sampling.top_p, defaults.top_p);
  EXPECT_FALSE(converted->sampling.seed.has_value());
  EXPECT_EQ(converted->sampling.logprobs, -1);
  EXPECT_EQ(converted->stopping.max_new_tokens, StoppingParams().max_new_tokens);
}

TEST_F(RequestConvertTest, PresentZeroDiffersFromAbsent) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->add_ids(5);
  request.mutable_sampling()->set_temperature(0.0f);  // greedy, not the default 1.0
  request.mutable_sampling()->set_seed(0);
  request.mutable_sampling()->set_logprobs(0);
  request.mutable_stopping()->set_max_new_tokens(3);
  request.mutable_stopping()->add_stop("\n");
  request.mutable_stopping()->add_stop_token_ids(7);
  request.mutable_stopping()->set_ignore_eos(true);
  request.set_priority(-2);
  RequestLimits priority_limits = limits_;
  priority_limits.priority_scheduling = true;
  auto converted = ToEngineRequest(request, *tokenizer_, priority_limits);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->prompt_tokens, std::vector<int32_t>({5}));
  EXPECT_EQ(converted->sampling.temperature, 0.0f);
  ASSERT_TRUE(converted->sampling.seed.has_value());
  EXPECT_EQ(*converted->sampling.seed, 0u);
  EXPECT_EQ(converted->sampling.logprobs, 0);
  EXPECT_EQ(converted->stopping.max_new_tokens, 3);
  EXPECT_EQ(converted->stopping.stop_strings, std::vector<std::string>({"\n"}));
  EXPECT_EQ(converted->stopping.stop_token_ids, std::vector<int32_t>({7}));
  EXPECT_TRUE(converted->stopping.ignore_eos);
  EXPECT_EQ(converted->priority, -2);
}

TEST_F(RequestConvertTest, LogitBiasAllowedTokensAndBadWords) {
  v1::GenerateRequest request;
  request.set_text("The server reads");
  auto* s = request.mutable_sampling();
  (*s->mutable_logit_bias())[9] = -100.0f;
  (*s->mutable_logit_bias())[3] = 2.5f;
  s->add_allowed_token_ids(4);
  s->add_allowed_token_ids(8);
  s->add_bad_words("\u3000\t The");  // leading whitespace is not part of the word (vLLM)
  s->add_bad_words("reads it");
  auto converted = ToEngineRequest(request, *tokenizer_, limits_);
  ASSERT_TRUE(converted.ok()) << converted.status();
  const SamplingParams& sp = converted->sampling;
  ASSERT_EQ(sp.logit_bias.size(), 2u);
  EXPECT_EQ(sp.logit_bias[0].token, 3) << "sorted by token";
  EXPECT_EQ(sp.logit_bias[0].bias, 2.5f);
  EXPECT_EQ(sp.logit_bias[1].token, 9);
  EXPECT_EQ(sp.allowed_token_ids, std::vector<int32_t>({4, 8}));
  // Each word as written and, where a leading space changes the first token only, with one.
  std::vector<std::vector<int32_t>> want;
  for (const char* word : {"The", "reads it"}) {
    const std::vector<int32_t> plain = *tokenizer_->Encode(word);
    const std::vector<int32_t> spaced = *tokenizer_->Encode(std::string(" ") + word);
    want.push_back(plain);
    if (spaced.size() == plain.size() && spaced[0] != plain[0]) want.push_back(spaced);
  }
  EXPECT_EQ(sp.bad_words_token_ids, want);
  EXPECT_EQ(want.size(), 3u) << "\"The\" and \" The\" are one token each; \" reads it\" is shorter";

  for (const char* bad : {"", "   ", "\u00a0\u2003"}) {
    v1::GenerateRequest empty = request;
    empty.mutable_sampling()->add_bad_words(bad);
    const absl::Status status = ToEngineRequest(empty, *tokenizer_, limits_).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(DetailsOf(status).field, "sampling.bad_words") << status;
  }
  v1::GenerateRequest many = request;
  for (size_t i = 0; i <= kMaxBadWords; ++i) many.mutable_sampling()->add_bad_words("x");
  EXPECT_EQ(DetailsOf(ToEngineRequest(many, *tokenizer_, limits_).status()).field,
            "sampling.bad_words");
}

TEST_F(RequestConvertTest, GuidedChoicesAreTokenizedAndNeedEos) {
  v1::GenerateRequest request;
  request.set_text("The server reads");
  request.mutable_sampling()->add_guided_choice("yes");
  request.mutable_sampling()->add_guided_choice(" no thanks");
  auto converted = ToEngineRequest(request, *tokenizer_, limits_);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->sampling.choice_token_ids,
            std::vector<std::vector<int32_t>>(
                {*tokenizer_->Encode("yes"), *tokenizer_->Encode(" no thanks")}));
  v1::GenerateRequest ignoring = request;
  ignoring.mutable_stopping()->set_ignore_eos(true);
  v1::GenerateRequest with_min = request;
  with_min.mutable_stopping()->set_min_new_tokens(2);
  v1::GenerateRequest empty = request;
  empty.mutable_sampling()->add_guided_choice("");
  v1::GenerateRequest many = request;
  for (size_t i = 0; i <= kMaxGuidedChoices; ++i) many.mutable_sampling()->add_guided_choice("x");
  for (const v1::GenerateRequest& bad : {ignoring, with_min, empty, many}) {
    const absl::Status status = ToEngineRequest(bad, *tokenizer_, limits_).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(DetailsOf(status).field, "sampling.guided_choice") << status;
  }
}

TEST_F(RequestConvertTest, JsonSchemaBecomesTheSamplersConstraint) {
  ConstraintCache cache([] { return TokenVocabulary::FromTokenizer(*tokenizer_); });
  v1::GenerateRequest request;
  request.set_text("The server reads");
  request.mutable_sampling()->set_json_schema(R"({"type": "object"})");
  auto converted = ToEngineRequest(request, *tokenizer_, limits_, &cache);
  ASSERT_TRUE(converted.ok()) << converted.status();
  ASSERT_NE(converted->sampling.constraint, nullptr);
  // It allows "{" first and not "[".
  auto first = converted->sampling.constraint->AllowedTokens({}, /*end_token=*/2);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(TokenAllowed(**first, tokenizer_->Encode("{")->front()));
  EXPECT_FALSE(TokenAllowed(**first, tokenizer_->Encode("[")->front()));
  // The same schema again is the same compiled constraint.
  auto again = ToEngineRequest(request, *tokenizer_, limits_, &cache);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->sampling.constraint, converted->sampling.constraint);

  v1::GenerateRequest unsupported = request;
  unsupported.mutable_sampling()->set_json_schema(R"({"type": "integer", "minimum": 0})");
  v1::GenerateRequest ignoring = request;
  ignoring.mutable_stopping()->set_ignore_eos(true);
  v1::GenerateRequest with_min = request;
  with_min.mutable_stopping()->set_min_new_tokens(1);
  v1::GenerateRequest with_choice = request;
  with_choice.mutable_sampling()->add_guided_choice("yes");
  for (const v1::GenerateRequest& bad : {unsupported, ignoring, with_min, with_choice}) {
    const absl::Status status = ToEngineRequest(bad, *tokenizer_, limits_, &cache).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(DetailsOf(status).field, "sampling.json_schema") << status;
  }
  EXPECT_NE(std::string(ToEngineRequest(unsupported, *tokenizer_, limits_, &cache)
                            .status()
                            .message())
                .find("'minimum' is not supported"),
            std::string::npos);
  // Without a cache (a caller without structured output), and json_compact alone.
  EXPECT_EQ(DetailsOf(ToEngineRequest(request, *tokenizer_, limits_).status()).field,
            "sampling.json_schema");
  v1::GenerateRequest compact_alone;
  compact_alone.set_text("x");
  compact_alone.mutable_sampling()->set_json_compact(true);
  EXPECT_EQ(DetailsOf(ToEngineRequest(compact_alone, *tokenizer_, limits_, &cache).status()).field,
            "sampling.json_compact");
}

TEST_F(RequestConvertTest, RegexBecomesTheSamplersConstraint) {
  ConstraintCache cache([] { return TokenVocabulary::FromTokenizer(*tokenizer_); });
  v1::GenerateRequest request;
  request.set_text("The server reads");
  request.mutable_sampling()->set_regex("[0-9]{2}");
  // Recent-only: a pattern not compiled yet stops the conversion, marked, compiling nothing.
  const auto recent_only = ConstraintCache::Mode::kRecentOnly;
  const absl::Status not_yet =
      ToEngineRequest(request, *tokenizer_, limits_, &cache, recent_only).status();
  EXPECT_TRUE(GuidedConstraintNotCompiled(not_yet)) << not_yet;
  EXPECT_EQ(cache.stats().compiles, 0);
  EXPECT_FALSE(GuidedConstraintNotCompiled(absl::NotFoundError("another")));
  auto converted = ToEngineRequest(request, *tokenizer_, limits_, &cache);
  ASSERT_TRUE(converted.ok()) << converted.status();
  ASSERT_NE(converted->sampling.constraint, nullptr);
  auto first = converted->sampling.constraint->AllowedTokens({}, /*end_token=*/2);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(TokenAllowed(**first, tokenizer_->Encode("7")->front()));
  EXPECT_FALSE(TokenAllowed(**first, tokenizer_->Encode("a")->front()));
  EXPECT_FALSE(TokenAllowed(**first, 2)) << "nothing matched yet: no EOS";

  // Compiled now: recent-only finds it.
  auto recent = ToEngineRequest(request, *tokenizer_, limits_, &cache, recent_only);
  ASSERT_TRUE(recent.ok()) << recent.status();
  EXPECT_EQ(recent->sampling.constraint, converted->sampling.constraint);

  v1::GenerateRequest bad = request;
  bad.mutable_sampling()->set_regex("(a)\\1");
  v1::GenerateRequest both = request;
  both.mutable_sampling()->set_json_schema("{}");
  v1::GenerateRequest ignoring = request;
  ignoring.mutable_stopping()->set_ignore_eos(true);
  for (const v1::GenerateRequest& r : {bad, ignoring}) {
    const absl::Status status = ToEngineRequest(r, *tokenizer_, limits_, &cache).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(DetailsOf(status).field, "sampling.regex") << status;
  }
  // A refused pattern is remembered: recent-only refuses it the same way.
  const absl::Status refused_again =
      ToEngineRequest(bad, *tokenizer_, limits_, &cache, recent_only).status();
  EXPECT_EQ(refused_again.code(), absl::StatusCode::kInvalidArgument) << refused_again;
  EXPECT_EQ(DetailsOf(refused_again).field, "sampling.regex");
  const absl::Status status = ToEngineRequest(both, *tokenizer_, limits_, &cache).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("give one of"), absl::string_view::npos) << status;
}

TEST_F(RequestConvertTest, GrammarBecomesTheSamplersConstraint) {
  ConstraintCache cache([] { return TokenVocabulary::FromTokenizer(*tokenizer_); });
  v1::GenerateRequest request;
  request.set_text("The server reads");
  request.mutable_sampling()->set_grammar("root ::= \"(\" [0-9]+ \")\"");
  auto converted = ToEngineRequest(request, *tokenizer_, limits_, &cache);
  ASSERT_TRUE(converted.ok()) << converted.status();
  ASSERT_NE(converted->sampling.constraint, nullptr);
  auto first = converted->sampling.constraint->AllowedTokens({}, /*end_token=*/2);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(TokenAllowed(**first, tokenizer_->Encode("(")->front()));
  EXPECT_FALSE(TokenAllowed(**first, tokenizer_->Encode("7")->front()));
  EXPECT_FALSE(TokenAllowed(**first, 2)) << "nothing matched yet: no EOS";

  v1::GenerateRequest left_recursive = request;
  left_recursive.mutable_sampling()->set_grammar("root ::= root \"a\" | \"b\"");
  v1::GenerateRequest ignoring = request;
  ignoring.mutable_stopping()->set_ignore_eos(true);
  for (const v1::GenerateRequest& r : {left_recursive, ignoring}) {
    const absl::Status status = ToEngineRequest(r, *tokenizer_, limits_, &cache).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(DetailsOf(status).field, "sampling.grammar") << status;
  }
  EXPECT_NE(ToEngineRequest(left_recursive, *tokenizer_, limits_, &cache)
                .status()
                .message()
                .find("rule 'root' is left-recursive"),
            absl::string_view::npos);
  v1::GenerateRequest two = request;
  two.mutable_sampling()->set_regex("[0-9]+");
  const absl::Status status = ToEngineRequest(two, *tokenizer_, limits_, &cache).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("give one of"), absl::string_view::npos) << status;
}

// A request whose constraint must be compiled while every compile slot is taken is refused as
// overload (retry later), not as a bad request: RESOURCE_EXHAUSTED with RetryInfo, which the
// gateway answers with 429 and Retry-After.
TEST_F(RequestConvertTest, BusyCompileSlotsAreARetryableRefusal) {
  ConstraintCacheOptions options;
  options.max_concurrent_compiles = 1;
  options.max_waiting_compiles = 0;
  ConstraintCache cache([] { return TokenVocabulary::FromTokenizer(*tokenizer_); }, options);
  absl::Notification release;
  std::thread holder([&] {
    (void)cache.GetOrCompile("held", [&](std::shared_ptr<const TokenVocabulary>)
                                         -> absl::StatusOr<ConstraintCache::Constraint> {
      release.WaitForNotification();
      return absl::InvalidArgumentError("released");
    });
  });
  while (cache.stats().compiles == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  v1::GenerateRequest request;
  request.set_text("The server reads");
  request.mutable_sampling()->set_regex("[0-9]{2}");
  const absl::Status busy = ToEngineRequest(request, *tokenizer_, limits_, &cache).status();
  release.Notify();
  holder.join();
  EXPECT_EQ(busy.code(), absl::StatusCode::kResourceExhausted) << busy;
  EXPECT_EQ(DetailsOf(busy).reason, "GUIDED_COMPILE_BUSY");
  ASSERT_TRUE(DetailsOf(busy).retry_delay.has_value());
  EXPECT_EQ(*DetailsOf(busy).retry_delay, absl::Seconds(1));
  EXPECT_NE(busy.message().find("sampling.regex"), absl::string_view::npos) << busy;
  // The slot is free again: the same request is admitted.
  EXPECT_TRUE(ToEngineRequest(request, *tokenizer_, limits_, &cache).ok());
}

// Tokens carry their text, raw bytes and whether they are special tokens (TGI's `special`), and
// so do their alternatives.
TEST_F(RequestConvertTest, FillTokenMarksSpecialTokens) {
  const int32_t eos = *tokenizer_->TokenToId("</s>");
  const int32_t word = tokenizer_->Encode("The")->front();
  TokenEvent event;
  event.token = word;
  event.logprob = -0.5f;
  event.top_logprobs = {{eos, -0.25f}, {word, -0.5f}};
  v1::Token out;
  FillToken(event, *tokenizer_, /*with_logprobs=*/true, &out);
  EXPECT_EQ(out.text(), "The");
  EXPECT_FALSE(out.special());
  ASSERT_EQ(out.top_logprobs_size(), 2);
  EXPECT_TRUE(out.top_logprobs(0).special());
  EXPECT_FALSE(out.top_logprobs(1).special());
  event.token = eos;
  v1::Token end;
  FillToken(event, *tokenizer_, /*with_logprobs=*/false, &end);
  EXPECT_TRUE(end.special());
  EXPECT_FALSE(end.has_logprob());
}

TEST_F(RequestConvertTest, TruncationKeepsTheEndOfThePromptBeforeTheLengthLimit) {
  v1::GenerateRequest request;
  for (int32_t id = 1; id <= 20; ++id) request.mutable_token_ids()->add_ids(id);  // > 8 allowed
  request.set_truncate_prompt_tokens(3);
  auto converted = ToEngineRequest(request, *tokenizer_, limits_);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->prompt_tokens, std::vector<int32_t>({18, 19, 20}));
  // A text prompt: its tokens' tail.
  v1::GenerateRequest text;
  text.set_text("The server reads the request and answers");
  const std::vector<int32_t> all = *tokenizer_->Encode(text.text());
  ASSERT_GT(all.size(), 2u);
  text.set_truncate_prompt_tokens(2);
  converted = ToEngineRequest(text, *tokenizer_, limits_);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->prompt_tokens, std::vector<int32_t>(all.end() - 2, all.end()));
  // Shorter than the limit: unchanged. Beyond max_input_tokens after truncation: still refused.
  v1::GenerateRequest short_text;
  short_text.set_text("The server reads");
  short_text.set_truncate_prompt_tokens(1000);
  converted = ToEngineRequest(short_text, *tokenizer_, limits_);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->prompt_tokens, *tokenizer_->Encode("The server reads"));
  request.set_truncate_prompt_tokens(9);
  EXPECT_EQ(ToEngineRequest(request, *tokenizer_, limits_).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST_F(RequestConvertTest, ZeroPriorityIsAcceptedWhateverThePolicy) {
  for (bool priority_scheduling : {false, true}) {
    v1::GenerateRequest request;
    request.set_text("x");
    RequestLimits limits = limits_;
    limits.priority_scheduling = priority_scheduling;
    auto converted = ToEngineRequest(request, *tokenizer_, limits);
    ASSERT_TRUE(converted.ok()) << converted.status();
    EXPECT_EQ(converted->priority, 0);
  }
}

// Generations submitted together (a gateway's choices) that the waiting queue could never hold
// at once are refused for good, not with a QUEUE_FULL that a retry would meet again.
TEST_F(RequestConvertTest, GroupLargerThanTheQueueIsRefusedForGood) {
  RequestLimits limits = limits_;
  limits.max_waiting_requests = 4;
  v1::GenerateRequest request;
  request.set_text("x");
  for (int32_t group : {0, 1, 4}) {
    request.set_group_size(group);
    EXPECT_TRUE(ToEngineRequest(request, *tokenizer_, limits).ok()) << "group_size " << group;
  }
  request.set_group_size(5);
  absl::Status refused = ToEngineRequest(request, *tokenizer_, limits).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(refused.message().find("5 generations at once"), absl::string_view::npos) << refused;
  EXPECT_NE(refused.message().find("max_waiting_requests 4"), absl::string_view::npos) << refused;
  EXPECT_EQ(DetailsOf(refused).field, "group_size");
  EXPECT_EQ(DetailsOf(refused).reason, "GROUP_TOO_LARGE");
  EXPECT_FALSE(DetailsOf(refused).retry_delay.has_value());
  request.set_group_size(-1);
  refused = ToEngineRequest(request, *tokenizer_, limits).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DetailsOf(refused).field, "group_size");
}

TEST_F(RequestConvertTest, RefusalsNameTheField) {
  struct Case {
    std::function<void(v1::GenerateRequest*)> edit;
    absl::StatusCode code;
    std::string needle;
    std::string field, reason;  // the BadRequest field violation and the ErrorInfo reason
  };
  const std::vector<Case> cases = {
      {[](v1::GenerateRequest*) {}, absl::StatusCode::kInvalidArgument, "prompt is missing",
       "prompt", "INVALID_PROMPT"},
      {[](v1::GenerateRequest* r) { r->set_text(""); }, absl::StatusCode::kInvalidArgument,
       "text must not be empty", "text", "INVALID_PROMPT"},
      {[](v1::GenerateRequest* r) { r->mutable_token_ids(); }, absl::StatusCode::kInvalidArgument,
       "token_ids must not be empty", "token_ids", "INVALID_PROMPT"},
      {[](v1::GenerateRequest* r) { r->set_text(std::string("ab\xff", 3)); },
       absl::StatusCode::kInvalidArgument, "UTF-8", "text", "INVALID_PROMPT"},
      {[](v1::GenerateRequest* r) {
         for (int i = 0; i < 9; ++i) r->mutable_token_ids()->add_ids(3);
       },
       absl::StatusCode::kOutOfRange, "prompt is too long: 9 tokens, max_input_tokens is 8",
       "token_ids", "PROMPT_TOO_LONG"},
      {[](v1::GenerateRequest* r) { r->set_text("one two three four five six seven eight nine"); },
       absl::StatusCode::kOutOfRange, "prompt is too long", "text", "PROMPT_TOO_LONG"},
      {[](v1::GenerateRequest* r) {
         r->set_text("x");
         r->set_model("other");
       },
       absl::StatusCode::kNotFound, "model 'other' is not served here", "model", "UNKNOWN_MODEL"},
      {[](v1::GenerateRequest* r) {
         r->set_text("x");
         r->set_model(std::string(300, 'm'));
       },
       absl::StatusCode::kInvalidArgument, "model: longer than", "model", "INVALID_MODEL_NAME"},
      {[](v1::GenerateRequest* r) {
         r->set_text("x");
         r->mutable_sampling()->set_logprobs(-1);
       },
       absl::StatusCode::kInvalidArgument, "sampling.logprobs", "sampling.logprobs",
       "INVALID_SAMPLING_PARAMS"},
      // Past the top as below the bottom: one message, in this API's range (no -1 "none").
      {[](v1::GenerateRequest* r) {
         r->set_text("x");
         r->mutable_sampling()->set_logprobs(21);
       },
       absl::StatusCode::kInvalidArgument, "sampling.logprobs must be in [0, 20], got 21",
       "sampling.logprobs", "INVALID_SAMPLING_PARAMS"},
      {[](v1::GenerateRequest* r) {
         r->set_text("x");
         r->mutable_sampling()->set_prompt_logprobs(21);
       },
       absl::StatusCode::kInvalidArgument, "sampling.prompt_logprobs must be in [0, 20], got 21",
       "sampling.prompt_logprobs", "INVALID_SAMPLING_PARAMS"},
      {[](v1::GenerateRequest* r) {
         r->set_text("x");
         r->set_truncate_prompt_tokens(-1);
       },
       absl::StatusCode::kInvalidArgument, "truncate_prompt_tokens must be >= 0",
       "truncate_prompt_tokens", "INVALID_PROMPT"},
      // limits_ schedules first come, first served: a client may not jump the queue.
      {[](v1::GenerateRequest* r) {
         r->set_text("x");
         r->set_priority(-1);
       },
       absl::StatusCode::kInvalidArgument, "--scheduling_policy=priority", "priority",
       "PRIORITY_NOT_ENABLED"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    v1::GenerateRequest request;
    cases[i].edit(&request);
    auto converted = ToEngineRequest(request, *tokenizer_, limits_);
    ASSERT_FALSE(converted.ok()) << "case " << i;
    EXPECT_EQ(converted.status().code(), cases[i].code) << "case " << i;
    EXPECT_NE(converted.status().message().find(cases[i].needle), absl::string_view::npos)
        << "case " << i << ": " << converted.status();
    const StatusDetails details = DetailsOf(converted.status());
    EXPECT_EQ(details.field, cases[i].field) << "case " << i;
    EXPECT_EQ(details.reason, cases[i].reason) << "case " << i;
    EXPECT_EQ(details.domain, "blossom.dev") << "case " << i;
  }
}

// Engine refusals are attributed by re-running the engine's validators, so the field is right
// whatever the engine's message says.
TEST(DescribeEngineRefusalTest, AttributesTheRejectedField) {
  constexpr int32_t kVocab = 100;
  struct Case {
    std::function<void(EngineRequest*)> edit;
    std::string field, reason;
  };
  const std::vector<Case> cases = {
      {[](EngineRequest* r) { r->sampling.top_p = 2.0f; }, "sampling.top_p",
       "INVALID_SAMPLING_PARAMS"},
      {[](EngineRequest* r) { r->sampling.temperature = -1.0f; }, "sampling.temperature",
       "INVALID_SAMPLING_PARAMS"},
      {[](EngineRequest* r) { r->sampling.presence_penalty = 3.0f; }, "sampling.presence_penalty",
       "INVALID_SAMPLING_PARAMS"},
      {[](EngineRequest* r) { r->sampling.logprobs = kMaxLogprobs + 1; }, "sampling.logprobs",
       "INVALID_SAMPLING_PARAMS"},
      {[](EngineRequest* r) { r->sampling.allowed_token_ids = {kVocab}; },
       "sampling.allowed_token_ids", "INVALID_SAMPLING_PARAMS"},
      {[](EngineRequest* r) { r->sampling.bad_words_token_ids = {{1, kVocab}}; },
       "sampling.bad_words", "INVALID_SAMPLING_PARAMS"},
      {[](EngineRequest* r) { r->sampling.logit_bias = {{kVocab, 1.0f}}; }, "sampling.logit_bias",
       "INVALID_SAMPLING_PARAMS"},
      {[](EngineRequest* r) { r->sampling.logit_bias = {{3, 101.0f}}; }, "sampling.logit_bias",
       "INVALID_SAMPLING_PARAMS"},
      {[](EngineRequest* r) { r->sampling.choice_token_ids = {{kVocab}}; },
       "sampling.guided_choice", "INVALID_SAMPLING_PARAMS"},
      {[](EngineRequest* r) { r->stopping.max_new_tokens = 0; }, "stopping.max_new_tokens",
       "INVALID_STOPPING_PARAMS"},
      {[](EngineRequest* r) { r->stopping.min_new_tokens = 20; }, "stopping.min_new_tokens",
       "INVALID_STOPPING_PARAMS"},
      {[](EngineRequest* r) { r->stopping.stop_token_ids = {kVocab}; }, "stopping.stop_token_ids",
       "INVALID_STOPPING_PARAMS"},
      {[](EngineRequest* r) { r->stopping.stop_token_ids.assign(kMaxStopTokenIds + 1, 1); },
       "stopping.stop_token_ids", "TOO_MANY_STOP_SEQUENCES"},
      {[](EngineRequest* r) { r->stopping.stop_strings.assign(kMaxStopStrings + 1, "x"); },
       "stopping.stop", "TOO_MANY_STOP_SEQUENCES"},
      {[](EngineRequest* r) { r->stopping.stop_strings = {""}; }, "stopping.stop",
       "INVALID_STOPPING_PARAMS"},
      {[](EngineRequest* r) { r->prompt_tokens = {1, kVocab + 5}; }, "token_ids",
       "INVALID_PROMPT"},
      // Every parameter valid: what remains is the scheduler's capacity.
      {[](EngineRequest* r) { r->stopping.max_new_tokens = 5000; }, "stopping.max_new_tokens",
       "CONTEXT_LENGTH_EXCEEDED"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    EngineRequest request;
    request.prompt_tokens = {1, 2};
    cases[i].edit(&request);
    absl::Status described = DescribeEngineRefusal(absl::InvalidArgumentError("engine says no"),
                                                   request, kVocab, "token_ids");
    EXPECT_EQ(described.code(), absl::StatusCode::kInvalidArgument) << "case " << i;
    EXPECT_EQ(described.message(), "engine says no") << "case " << i;
    const StatusDetails details = DetailsOf(described);
    EXPECT_EQ(details.field, cases[i].field) << "case " << i;
    EXPECT_EQ(details.field_description, "engine says no") << "case " << i;
    EXPECT_EQ(details.reason, cases[i].reason) << "case " << i;
    EXPECT_FALSE(details.retry_delay.has_value()) << "case " << i;
  }
}

TEST(DescribeEngineRefusalTest, OverloadInvitesARetry) {
  absl::Status full = DescribeEngineRefusal(absl::ResourceExhaustedError("waiting queue is full"),
                                            EngineRequest(), 100, "text");
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(DetailsOf(full).reason, "QUEUE_FULL");
  EXPECT_EQ(DetailsOf(full).retry_delay, kQueueFullRetryDelay);
  EXPECT_TRUE(DetailsOf(full).field.empty());
  absl::Status stopping = DescribeEngineRefusal(absl::UnavailableError("shutting down"),
                                                EngineRequest(), 100, "text");
  EXPECT_EQ(DetailsOf(stopping).reason, "SHUTTING_DOWN");
  EXPECT_TRUE(DetailsOf(stopping).retry_delay.has_value());
  // A request whose own masks leave no first token: the reason a later dead end gets, no retry.
  absl::Status impossible = DescribeEngineRefusal(
      absl::FailedPreconditionError("no token can be sampled: allowed_token_ids and bad_words "
                                    "leave no token of the vocabulary to choose from"),
      EngineRequest(), 100, "text");
  EXPECT_EQ(impossible.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DetailsOf(impossible).reason, "NO_TOKEN_POSSIBLE");
  EXPECT_FALSE(DetailsOf(impossible).retry_delay.has_value());
  // Anything else passes through untouched.
  EXPECT_EQ(DetailsOf(DescribeEngineRefusal(absl::InternalError("x"), EngineRequest(), 100, "text"))
                .reason,
            "");
}

TEST_F(RequestConvertTest, MaxNewTokensToLimitFillsTheContext) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->add_ids(5);
  request.mutable_token_ids()->add_ids(6);
  request.mutable_stopping()->set_max_new_tokens_to_limit(true);
  RequestLimits limits = limits_;
  limits.max_total_tokens = 10;
  auto converted = ToEngineRequest(request, *tokenizer_, limits);
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->stopping.max_new_tokens, 8);
  // An explicit max_new_tokens wins.
  request.mutable_stopping()->set_max_new_tokens(3);
  EXPECT_EQ(ToEngineRequest(request, *tokenizer_, limits)->stopping.max_new_tokens, 3);
  // No room left: CONTEXT_LENGTH_EXCEEDED on max_new_tokens.
  request.mutable_stopping()->clear_max_new_tokens();
  limits.max_total_tokens = 2;
  auto full = ToEngineRequest(request, *tokenizer_, limits);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(DetailsOf(full.status()).reason, "CONTEXT_LENGTH_EXCEEDED");
  EXPECT_EQ(DetailsOf(full.status()).field, "stopping.max_new_tokens");
}

TEST_F(RequestConvertTest, SkipSpecialTokensAndStopAtTextEndMapWithTheirDefaults) {
  v1::GenerateRequest request;
  request.set_text("x");
  EXPECT_TRUE(ToEngineRequest(request, *tokenizer_, limits_)->stopping.skip_special_tokens);
  request.mutable_stopping()->set_skip_special_tokens(false);
  EXPECT_FALSE(ToEngineRequest(request, *tokenizer_, limits_)->stopping.skip_special_tokens);
  EXPECT_FALSE(ToEngineRequest(request, *tokenizer_, limits_)->stopping.stop_at_text_end);
  request.mutable_stopping()->set_stop_at_text_end(true);
  EXPECT_TRUE(ToEngineRequest(request, *tokenizer_, limits_)->stopping.stop_at_text_end);
}

TEST(SystemFingerprintTest, VersionAndDtype) {
  v1::ModelInfo info;
  info.set_version("0.3.0");
  info.set_dtype("bfloat16");
  EXPECT_EQ(SystemFingerprint(info), "blossom-0.3.0-bfloat16");
}

TEST_F(RequestConvertTest, MatchingModelNameIsAccepted) {
  v1::GenerateRequest request;
  request.set_text("x");
  request.set_model("tiny");
  EXPECT_TRUE(ToEngineRequest(request, *tokenizer_, limits_).ok());
}

TEST(FinalInfoTest, TimingsAndUsage) {
  EngineEvent event;
  event.finished = true;
  event.finish_reason = FinishReason::kStopString;
  event.token.matched_stop = "\n\n";
  event.usage.prompt_tokens = 4;
  event.usage.generated_tokens = 5;
  const Clock::time_point t0 = Clock::now();
  event.timings.arrival = t0;
  event.timings.first_scheduled = t0 + std::chrono::milliseconds(10);
  event.timings.first_token = t0 + std::chrono::milliseconds(50);
  event.timings.finished = t0 + std::chrono::milliseconds(250);
  event.timings.num_preemptions = 2;
  event.seed = 1234;
  event.max_new_tokens = 16;
  v1::FinalInfo info;
  FillFinalInfo(event, "req-7", &info);
  EXPECT_EQ(info.finish_reason(), v1::FINISH_REASON_STOP_STRING);
  EXPECT_EQ(info.matched_stop(), "\n\n");
  EXPECT_EQ(info.request_id(), "req-7");
  EXPECT_EQ(info.usage().prompt_tokens(), 4);
  EXPECT_EQ(info.usage().generated_tokens(), 5);
  EXPECT_NEAR(info.timings().queue_seconds(), 0.010, 1e-9);
  EXPECT_NEAR(info.timings().time_to_first_token_seconds(), 0.050, 1e-9);
  EXPECT_NEAR(info.timings().total_seconds(), 0.250, 1e-9);
  EXPECT_NEAR(info.timings().time_per_output_token_seconds(), 0.050, 1e-9);  // 200 ms, 4 gaps
  EXPECT_EQ(info.timings().preemptions(), 2);
  EXPECT_EQ(info.seed(), 1234u);
  EXPECT_EQ(info.max_new_tokens(), 16);
}

TEST(FinishReasonTest, EveryEngineReasonMaps) {
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kLength), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kEosToken), v1::FINISH_REASON_EOS_TOKEN);
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kStopToken), v1::FINISH_REASON_STOP_TOKEN);
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kStopString), v1::FINISH_REASON_STOP_STRING);
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kCancelled), v1::FINISH_REASON_CANCELLED);
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kError), v1::FINISH_REASON_ERROR);
  EXPECT_EQ(ToProtoFinishReason(FinishReason::kAborted), v1::FINISH_REASON_ABORTED);
}

// A request the engine's shutdown cut is retryable elsewhere (as a refusal while draining); a
// model failure's UNAVAILABLE is not, and says MODEL_FAILED (a gateway reads an UNAVAILABLE
// without the server's reason as a lost connection); other statuses stay as they are.
TEST(DescribeEngineEndTest, OnlyAShutdownInvitesARetry) {
  const StatusDetails cut = DetailsOf(DescribeEngineEnd(EngineShutdownError("shut down")));
  EXPECT_EQ(cut.reason, error_reason::kShuttingDown);
  EXPECT_EQ(cut.retry_delay, kUnavailableRetryDelay);
  const absl::Status failed =
      DescribeEngineEnd(absl::UnavailableError("the model can no longer run"));
  EXPECT_TRUE(absl::IsUnavailable(failed));
  EXPECT_EQ(failed.message(), "the model can no longer run");
  EXPECT_EQ(DetailsOf(failed).reason, error_reason::kModelFailed);
  EXPECT_FALSE(DetailsOf(failed).retry_delay.has_value());
  const absl::Status internal = absl::InternalError("a step failed");
  EXPECT_EQ(DescribeEngineEnd(internal), internal);
  // The request's own masks left no token: a reason, not a retry.
  const absl::Status dead_end = DescribeEngineEnd(absl::FailedPreconditionError(
      "no token can be sampled: every logit is -inf after suppression and penalties"));
  EXPECT_TRUE(absl::IsFailedPrecondition(dead_end));
  EXPECT_EQ(DetailsOf(dead_end).reason, error_reason::kNoTokenPossible);
  EXPECT_FALSE(DetailsOf(dead_end).retry_delay.has_value());
}

}  // namespace
}  // namespace blossom
