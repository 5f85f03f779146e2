// The gRPC service over loopback with the CPU backend and the 4-head fixture model: what requests
// ask for and get back: validation naming the field, prompt logprobs against transformers,
// special tokens, the token limits, prompt tokens and Tokenize.
#include "server/blossom_service.h"

#include <atomic>
#include <chrono>
#include <cctype>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/blossom/v1/stream_request.h"
#include "server/tokenize_rpc.h"
#include "server/blossom_service_test_util.h"
#include "server/grpc_status.h"
#include "server/status_details.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

using testing::Greedy;
using testing::ServiceFixture;

// prompt_logprobs over gRPC, unary and stream, against Hugging Face's log_softmax (golden.json).
TEST(BlossomServiceTest, PromptLogprobsMatchTransformers) {
  ServiceFixture fixture;
  fixture.Load();
  const nlohmann::json golden = nlohmann::json::parse(
      ReadFileOrEmpty(FixturePath("goldens/bloom-tiny-h4/golden.json")), nullptr, false);
  ASSERT_FALSE(golden.is_discarded());
  const auto& item = golden["logits"][1];
  const auto ids = item["input_ids"].get<std::vector<int32_t>>();
  const auto want = item["prompt_logprobs"].get<std::vector<double>>();
  v1::GenerateRequest request = Greedy("", 3);
  request.mutable_token_ids()->mutable_ids()->Assign(ids.begin(), ids.end());
  request.mutable_sampling()->set_prompt_logprobs(2);
  auto check = [&](const google::protobuf::RepeatedPtrField<v1::Token>& got) {
    ASSERT_EQ(got.size(), static_cast<int>(ids.size()));
    EXPECT_EQ(got[0].id(), ids[0]);
    EXPECT_FALSE(got[0].has_logprob());  // nothing precedes the first token
    EXPECT_EQ(got[0].top_logprobs_size(), 0);
    EXPECT_FALSE(got[0].has_rank());
    for (size_t p = 1; p < ids.size(); ++p) {
      EXPECT_EQ(got[p].id(), ids[p]);
      ASSERT_TRUE(got[p].has_logprob());
      EXPECT_NEAR(got[p].logprob(), want[p - 1], 2e-4) << "position " << p;
      ASSERT_EQ(got[p].top_logprobs_size(), 2);
      // The rank agrees with the alternatives: as many of them are more likely as the rank says
      // (up to the two listed; the fixture's logprobs have no exact ties).
      ASSERT_TRUE(got[p].has_rank());
      int more_likely = 0;
      for (const v1::TopLogprob& alt : got[p].top_logprobs()) {
        more_likely += alt.logprob() > got[p].logprob();
      }
      EXPECT_EQ(more_likely, std::min(got[p].rank() - 1, 2)) << "position " << p;
      EXPECT_EQ(got[p].text(), fixture.tokenizer().Decode({ids[p]}));
    }
  };
  grpc::ClientContext unary_context;
  v1::GenerateResponse unary;
  ASSERT_TRUE(fixture.stub().Generate(&unary_context, request, &unary).ok());
  check(unary.prompt_logprobs());

  grpc::ClientContext stream_context;
  auto reader = fixture.stub().GenerateStream(&stream_context, v1::ToStreamRequest(request));
  v1::GenerateStreamResponse message;
  int messages_with_prompt_logprobs = 0, tokens_before = 0;
  while (reader->Read(&message)) {
    if (message.prompt_logprobs_size() > 0) {
      ++messages_with_prompt_logprobs;
      EXPECT_EQ(tokens_before, 0) << "sent with the first token";
      check(message.prompt_logprobs());
    }
    tokens_before += message.has_token();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(messages_with_prompt_logprobs, 1);

  // Not requested: none; out of range: INVALID_ARGUMENT naming the field.
  grpc::ClientContext plain_context, bad_context;
  v1::GenerateResponse plain, bad;
  request.mutable_sampling()->clear_prompt_logprobs();
  ASSERT_TRUE(fixture.stub().Generate(&plain_context, request, &plain).ok());
  EXPECT_EQ(plain.prompt_logprobs_size(), 0);
  request.mutable_sampling()->set_prompt_logprobs(21);
  grpc::Status status = fixture.stub().Generate(&bad_context, request, &bad);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("prompt_logprobs"), std::string::npos)
      << status.error_message();
}

TEST(BlossomServiceTest, InvalidArgumentsNameTheField) {
  ServiceFixture fixture;
  fixture.Load();
  struct Case {
    std::function<void(v1::GenerateRequest*)> edit;
    grpc::StatusCode code;
    std::string needle;
    std::string field, reason;  // from grpc-status-details-bin
  };
  const std::vector<Case> cases = {
      {[](v1::GenerateRequest* r) { r->mutable_sampling()->set_top_p(1.5f); },
       grpc::StatusCode::INVALID_ARGUMENT, "top_p", "sampling.top_p", "INVALID_SAMPLING_PARAMS"},
      {[](v1::GenerateRequest* r) { r->mutable_sampling()->set_temperature(-1.0f); },
       grpc::StatusCode::INVALID_ARGUMENT, "temperature", "sampling.temperature",
       "INVALID_SAMPLING_PARAMS"},
      {[](v1::GenerateRequest* r) { r->mutable_sampling()->set_temperature(NAN); },
       grpc::StatusCode::INVALID_ARGUMENT, "temperature", "sampling.temperature",
       "INVALID_SAMPLING_PARAMS"},
      {[](v1::GenerateRequest* r) { r->mutable_stopping()->set_max_new_tokens(0); },
       grpc::StatusCode::INVALID_ARGUMENT, "max_new_tokens", "stopping.max_new_tokens",
       "INVALID_STOPPING_PARAMS"},
      {[](v1::GenerateRequest* r) { r->mutable_stopping()->set_max_new_tokens(100000); },
       grpc::StatusCode::INVALID_ARGUMENT, "max_total_tokens", "stopping.max_new_tokens",
       "CONTEXT_LENGTH_EXCEEDED"},
      {[](v1::GenerateRequest* r) {
         r->clear_text();
         r->mutable_token_ids()->add_ids(999999);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "vocabulary", "token_ids", "INVALID_PROMPT"},
      // The out-of-vocabulary id is in the part truncate_prompt_tokens drops: the refusal is
      // for the length the engine saw, not the dropped id.
      {[](v1::GenerateRequest* r) {
         r->clear_text();
         r->mutable_token_ids()->add_ids(999999);
         r->mutable_token_ids()->add_ids(5);
         r->set_truncate_prompt_tokens(1);
         r->mutable_stopping()->set_max_new_tokens(100000);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "max_total_tokens", "stopping.max_new_tokens",
       "CONTEXT_LENGTH_EXCEEDED"},
      {[](v1::GenerateRequest* r) { r->mutable_stopping()->add_stop(""); },
       grpc::StatusCode::INVALID_ARGUMENT, "stop", "stopping.stop", "INVALID_STOPPING_PARAMS"},
      {[](v1::GenerateRequest* r) {
         for (int i = 0; i < 17; ++i) r->mutable_stopping()->add_stop("s");
       },
       grpc::StatusCode::INVALID_ARGUMENT, "stop", "stopping.stop", "TOO_MANY_STOP_SEQUENCES"},
      {[](v1::GenerateRequest* r) { r->set_model("gpt-9"); }, grpc::StatusCode::NOT_FOUND,
       "gpt-9", "model", "UNKNOWN_MODEL"},
      // Issue 14: an 8,000-character name was echoed into the status, overflowing gRPC's
      // metadata into RESOURCE_EXHAUSTED; a newline in it reached the logs raw.
      {[](v1::GenerateRequest* r) { r->set_model(std::string(8000, 'm')); },
       grpc::StatusCode::INVALID_ARGUMENT, "model: longer than 256 bytes", "model",
       "INVALID_MODEL_NAME"},
      {[](v1::GenerateRequest* r) { r->set_model("x\n[critical] forged"); },
       grpc::StatusCode::NOT_FOUND, "x\\x0a[critical] forged", "model", "UNKNOWN_MODEL"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    v1::GenerateRequest request = Greedy("Hello", 4);
    cases[i].edit(&request);
    grpc::ClientContext context;
    v1::GenerateResponse response;
    grpc::Status status = fixture.stub().Generate(&context, request, &response);
    EXPECT_EQ(status.error_code(), cases[i].code) << "case " << i << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(cases[i].needle), std::string::npos)
        << "case " << i << ": " << status.error_message();
    const StatusDetails details = DetailsOf(FromGrpcStatus(status));
    EXPECT_EQ(details.field, cases[i].field) << "case " << i;
    EXPECT_EQ(details.reason, cases[i].reason) << "case " << i;
    EXPECT_FALSE(details.retry_delay.has_value()) << "case " << i << ": no retry invitation";
  }
  EXPECT_EQ(fixture.engine().num_unfinished(), 0);
}

// Special tokens in the text only on request (vLLM's skip_special_tokens=false); Token.text and
// token_bytes always carry each token. Sampling near-uniformly until a special token comes up
// (4 of the fixture's 2,048 ids are special), then the same seed with each setting.
TEST(BlossomServiceTest, SkipSpecialTokensControlsTheText) {
  ServiceFixture fixture;
  fixture.Load();
  auto generate = [&](uint64_t seed, bool skip) {
    v1::GenerateRequest request;
    request.set_text("Special");
    request.mutable_sampling()->set_temperature(100.0f);
    request.mutable_sampling()->set_seed(seed);
    request.mutable_stopping()->set_max_new_tokens(500);
    request.mutable_stopping()->set_ignore_eos(true);
    request.mutable_stopping()->set_skip_special_tokens(skip);
    grpc::ClientContext context;
    v1::GenerateResponse response;
    grpc::Status status = fixture.stub().Generate(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  };
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    v1::GenerateResponse kept = generate(seed, /*skip=*/false);
    std::vector<int32_t> ids;
    bool special = false;
    for (const v1::Token& t : kept.tokens()) {
      ids.push_back(t.id());
      special |= fixture.tokenizer().IsSpecial(t.id());
      EXPECT_EQ(t.token_bytes(), fixture.tokenizer().DecodedBytes(t.id(), false));
    }
    if (!special) continue;
    EXPECT_EQ(kept.text(), fixture.tokenizer().Decode(ids, /*skip_special_tokens=*/false));
    v1::GenerateResponse skipped = generate(seed, /*skip=*/true);
    ASSERT_EQ(skipped.tokens_size(), kept.tokens_size());
    EXPECT_EQ(skipped.text(), fixture.tokenizer().Decode(ids, /*skip_special_tokens=*/true));
    EXPECT_NE(skipped.text(), kept.text());
    return;
  }
  FAIL() << "no special token in 20 x 500 near-uniform samples";
}

// Chat/TGI without a limit: as many new tokens as fit max_total_tokens; and every final info
// names the server's configuration.
TEST(BlossomServiceTest, MaxNewTokensToLimitAndSystemFingerprint) {
  EngineConfig config;
  config.scheduler.max_total_tokens = 40;
  ServiceOptions options;
  options.limits.max_total_tokens = 40;
  ServiceFixture fixture(options, config);
  fixture.Load();
  v1::GenerateRequest request = Greedy("Hello", 4);
  request.mutable_stopping()->clear_max_new_tokens();
  request.mutable_stopping()->set_max_new_tokens_to_limit(true);
  grpc::ClientContext context;
  v1::GenerateResponse response;
  grpc::Status status = fixture.stub().Generate(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.final().usage().prompt_tokens() + response.final().usage().generated_tokens(),
            40);
  EXPECT_EQ(response.final().finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(response.final().system_fingerprint(), "blossom-dev-unknown");  // fixture: no version
  EXPECT_GT(response.final().timings().time_per_output_token_seconds(), 0.0);
}

TEST(BlossomServiceTest, TokenizeReturnsIdsTokensAndOffsets) {
  ServiceFixture fixture;
  fixture.Load();
  grpc::ClientContext context;
  v1::TokenizeRequest request;
  request.set_text("The server reads");
  v1::TokenizeResponse response;
  ASSERT_TRUE(fixture.stub().Tokenize(&context, request, &response).ok());
  const std::vector<int32_t> expected = *fixture.tokenizer().Encode("The server reads");
  ASSERT_EQ(response.ids_size(), static_cast<int>(expected.size()));
  ASSERT_EQ(response.offsets_size(), response.ids_size());
  std::string rebuilt;
  for (int i = 0; i < response.ids_size(); ++i) {
    EXPECT_EQ(response.ids(i), expected[i]);
    rebuilt += request.text().substr(response.offsets(i).start(),
                                     response.offsets(i).end() - response.offsets(i).start());
  }
  EXPECT_EQ(rebuilt, request.text());
  EXPECT_GT(response.max_total_tokens(), 0);

  // Detokenize: the ids back to the text; an id outside the vocabulary names the field.
  grpc::ClientContext detokenize_context;
  v1::DetokenizeRequest detokenize;
  for (int32_t id : expected) detokenize.add_ids(id);
  v1::DetokenizeResponse text;
  ASSERT_TRUE(fixture.stub().Detokenize(&detokenize_context, detokenize, &text).ok());
  EXPECT_EQ(text.text(), "The server reads");
  grpc::ClientContext bad_context;
  detokenize.add_ids(1 << 30);
  const grpc::Status bad = fixture.stub().Detokenize(&bad_context, detokenize, &text);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(DetailsOf(FromGrpcStatus(bad)).field, "ids");

  // `model`, as Generate's: the served name (the fixture's directory) or nothing; another name
  // is NOT_FOUND naming the field (vLLM's /tokenize and /detokenize answer 404).
  request.set_model("bloom-tiny-h4");
  grpc::ClientContext named_context;
  EXPECT_TRUE(fixture.stub().Tokenize(&named_context, request, &response).ok());
  for (const std::string& model : {std::string("gpt-9"), std::string(300, 'm')}) {
    request.set_model(model);
    grpc::ClientContext tokenize_other;
    const grpc::Status tokenized = fixture.stub().Tokenize(&tokenize_other, request, &response);
    detokenize.set_model(model);
    grpc::ClientContext detokenize_other;
    const grpc::Status detokenized = fixture.stub().Detokenize(&detokenize_other, detokenize, &text);
    for (const grpc::Status& status : {tokenized, detokenized}) {
      EXPECT_EQ(status.error_code(), model.size() > 256 ? grpc::StatusCode::INVALID_ARGUMENT
                                                        : grpc::StatusCode::NOT_FOUND);
      EXPECT_EQ(DetailsOf(FromGrpcStatus(status)).field, "model");
    }
  }
}

// Issue 14: max_input_tokens did not apply to Tokenize, so a 600 KB text made a 10.7 MB reply.
// Tokenize counts texts longer than max_input_tokens (TGI and vLLM do: clients compare the count
// with the context), and refuses only past kMaxTokenizeTokens, which bounds the reply.
TEST(BlossomServiceTest, TokenizeIsBoundedByTheReplyNotByMaxInputTokens) {
  ServiceOptions options;
  options.limits.max_input_tokens = 64;
  ServiceFixture fixture(options);
  fixture.Load();
  std::string text;
  for (int i = 0; i < 500; ++i) absl::StrAppend(&text, i, " ");
  {
    grpc::ClientContext context;
    v1::TokenizeRequest request;
    request.set_text(text);
    v1::TokenizeResponse response;
    grpc::Status status = fixture.stub().Tokenize(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_GT(response.ids_size(), 64);
  }
  std::string huge;
  for (int i = 0; i <= kMaxTokenizeTokens; ++i) huge += "a ";
  grpc::ClientContext context;
  v1::TokenizeRequest request;
  request.set_text(huge);
  v1::TokenizeResponse response;
  grpc::Status status = fixture.stub().Tokenize(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OUT_OF_RANGE) << status.error_message();
  EXPECT_NE(status.error_message().find("at most 65536"), std::string::npos)
      << status.error_message();
  const StatusDetails details = DetailsOf(FromGrpcStatus(status));
  EXPECT_EQ(details.reason, "PROMPT_TOO_LONG");
  EXPECT_EQ(details.field, "text");
}

TEST(BlossomServiceTest, ReturnPromptTokensForTextAndIdsUnaryAndStream) {
  ServiceFixture fixture;
  fixture.Load();
  const std::vector<int32_t> ids = *fixture.tokenizer().Encode("The server reads");
  v1::GenerateRequest by_text = Greedy("The server reads", 3);
  by_text.set_return_prompt_tokens(true);
  v1::GenerateRequest by_ids = by_text;
  by_ids.clear_text();
  for (int32_t id : ids) by_ids.mutable_token_ids()->add_ids(id);
  for (const v1::GenerateRequest& request : {by_text, by_ids}) {
    SCOPED_TRACE(request.has_text() ? "text" : "token ids");
    grpc::ClientContext unary_context;
    v1::GenerateResponse unary;
    ASSERT_TRUE(fixture.stub().Generate(&unary_context, request, &unary).ok());
    EXPECT_EQ(std::vector<int32_t>(unary.final().prompt_token_ids().begin(),
                                   unary.final().prompt_token_ids().end()),
              ids);
    grpc::ClientContext stream_context;
    auto reader = fixture.stub().GenerateStream(&stream_context, v1::ToStreamRequest(request));
    v1::GenerateStreamResponse message;
    std::vector<int32_t> streamed;
    while (reader->Read(&message)) {
      if (message.has_final()) {
        streamed.assign(message.final().prompt_token_ids().begin(),
                        message.final().prompt_token_ids().end());
      }
    }
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(streamed, ids);
  }
}

// Structured-output requests are prepared on the service's compile pool, not on gRPC's
// threads: they are answered as before, unary and streamed (the output matches the pattern and
// ends with EOS), a pattern that cannot compile is still a 400 naming its field, and many at
// once (distinct patterns, each compiled) all finish while a Tokenize call is answered.
TEST(BlossomServiceTest, StructuredOutputIsPreparedOffTheGrpcThreads) {
  ServiceFixture fixture;
  fixture.Load();
  auto regex_request = [](const std::string& pattern) {
    v1::GenerateRequest request = Greedy("The server reads", 8);
    request.mutable_stopping()->set_ignore_eos(false);
    request.mutable_sampling()->set_regex(pattern);
    return request;
  };
  {
    grpc::ClientContext context;
    v1::GenerateResponse response;
    const grpc::Status status =
        fixture.stub().Generate(&context, regex_request("[0-9]{2}"), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.text().size(), 2u) << response.text();
    EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(response.text()[0]))) << response.text();
    EXPECT_EQ(response.final().finish_reason(), v1::FINISH_REASON_EOS_TOKEN);
  }
  {
    grpc::ClientContext context;
    auto reader =
        fixture.stub().GenerateStream(&context, v1::ToStreamRequest(regex_request("(ab|cd)")));
    v1::GenerateStreamResponse message;
    std::string text;
    while (reader->Read(&message)) text += message.text_delta();
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_TRUE(text == "ab" || text == "cd") << text;
  }
  {
    grpc::ClientContext context;
    v1::GenerateResponse response;
    const grpc::Status status =
        fixture.stub().Generate(&context, regex_request("(a)\\1"), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(DetailsOf(FromGrpcStatus(status)).field, "sampling.regex");
  }
  constexpr int kCalls = 12;
  std::atomic<int> ok{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < kCalls; ++i) {
    callers.emplace_back([&, i] {
      grpc::ClientContext context;
      v1::GenerateResponse response;
      v1::GenerateRequest request = regex_request(absl::StrCat("x{", i + 1, "}[0-9]"));
      request.mutable_stopping()->set_max_new_tokens(32);
      const std::string xs(static_cast<size_t>(i + 1), 'x');
      if (fixture.stub().Generate(&context, request, &response).ok() &&
          response.text().size() == xs.size() + 1 && absl::StartsWith(response.text(), xs) &&
          std::isdigit(static_cast<unsigned char>(response.text().back()))) {
        ++ok;
      }
    });
  }
  grpc::ClientContext tokenize_context;
  v1::TokenizeRequest tokenize;
  tokenize.set_text("The server reads");
  v1::TokenizeResponse tokens;
  EXPECT_TRUE(fixture.stub().Tokenize(&tokenize_context, tokenize, &tokens).ok());
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(ok.load(), kCalls);
  // Each of them (the refused pattern too) was prepared on the pool, as it compiled something.
  // (A task is counted once it returns, which may be just after its call was answered.)
  const WorkerPool& pool = *fixture.service().compile_pool();
  for (int i = 0; i < 10000 && pool.completed() < kCalls + 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(pool.completed(), kCalls + 3);
  EXPECT_NE(fixture.registry().Render().find(
                "blossom_guided_requests_preparing{model_name=\"bloom-tiny-h4\"} 0"),
            std::string::npos)
      << "the gauge is back to 0";
  // A pattern compiled already is prepared at once, on the gRPC thread.
  grpc::ClientContext again_context;
  v1::GenerateResponse again;
  EXPECT_TRUE(fixture.stub().Generate(&again_context, regex_request("[0-9]{2}"), &again).ok());
  EXPECT_EQ(pool.completed(), kCalls + 3);
}

// The engine's cap on prompt + max_new_tokens (which blossom-server lowers to what the KV cache
// holds, kv_fit.h) is the one the service checks and fills "up to the limit" requests with, even
// when the service was built with a larger one.
TEST(BlossomServiceTest, TheEnginesTotalTokenCapIsTheServicesToo) {
  EngineConfig engine_config;
  engine_config.scheduler.max_total_tokens = 40;
  ServiceOptions options;
  options.limits.max_total_tokens = 2048;
  ServiceFixture fixture(options, engine_config);
  fixture.Load();
  const int prompt = static_cast<int>(fixture.tokenizer().Encode("The server reads")->size());
  v1::GenerateRequest to_limit = Greedy("The server reads", 1);
  to_limit.mutable_stopping()->clear_max_new_tokens();
  to_limit.mutable_stopping()->set_max_new_tokens_to_limit(true);
  grpc::ClientContext context;
  v1::GenerateResponse response;
  const grpc::Status status = fixture.stub().Generate(&context, to_limit, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.final().usage().generated_tokens(), 40 - prompt);
  grpc::ClientContext too_long_context;
  v1::GenerateResponse too_long;
  const grpc::Status refused =
      fixture.stub().Generate(&too_long_context, Greedy("The server reads", 41 - prompt), &too_long);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << refused.error_message();
  EXPECT_NE(refused.error_message().find("40"), std::string::npos) << refused.error_message();
}

}  // namespace
}  // namespace blossom
