#include "clients/gateway/tgi_api.h"

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "clients/gateway/api_errors.h"
#include "engine/text/utf8.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace blossom::gateway::tgi {
namespace {

// Issue 14: /info said 16 (the server's limit) while the routes reject more than 4.
TEST(TgiApiTest, InfoReportsTheStopLimitTheRoutesEnforce) {
  blossom::v1::ModelInfo info;
  info.mutable_limits()->set_max_stop_strings(16);
  EXPECT_EQ(InfoJson(info, "m")["max_stop_sequences"], 4);
  info.mutable_limits()->set_max_stop_strings(2);
  EXPECT_EQ(InfoJson(info, "m")["max_stop_sequences"], 2);
  // And exactly that many are accepted.
  EXPECT_TRUE(ParseGenerateRequest(
                  R"({"inputs":"x","parameters":{"stop":["a","b","c","d"]}})").ok());
  EXPECT_FALSE(ParseGenerateRequest(
                   R"({"inputs":"x","parameters":{"stop":["a","b","c","d","e"]}})").ok());
}

TEST(TgiApiTest, RejectsMalformedRequestsWith422) {
  struct Case {
    std::string body, message, param;
  };
  const Case cases[] = {
      {R"({"parameters":{}})", "inputs: is required", "inputs"},
      {R"({"inputs":""})", "must not be empty", "inputs"},
      {R"({"inputs":["a"]})", "must be a string", "inputs"},
      {R"({"inputs":"a","parameters":[]})", "must be an object", "parameters"},
      {R"({"inputs":"a","parameters":{"temperature":0}})", "temperature", "parameters.temperature"},
      {R"({"inputs":"a","parameters":{"temperature":-1}})", "temperature", "parameters.temperature"},
      {R"({"inputs":"a","parameters":{"top_k":0}})", "at least 1", "parameters.top_k"},
      {R"({"inputs":"a","parameters":{"top_p":1.0}})", "top_p", "parameters.top_p"},
      {R"({"inputs":"a","parameters":{"typical_p":0}})", "typical_p", "parameters.typical_p"},
      {R"({"inputs":"a","parameters":{"repetition_penalty":0}})", "repetition_penalty", "parameters.repetition_penalty"},
      {R"({"inputs":"a","parameters":{"max_new_tokens":0}})", "at least 1", "parameters.max_new_tokens"},
      {R"({"inputs":"a","parameters":{"max_new_tokens":"5"}})", "must be an integer", "parameters.max_new_tokens"},
      {R"({"inputs":"a","parameters":{"seed":-1}})", "at least 0", "parameters.seed"},
      {R"({"inputs":"a","parameters":{"do_sample":"true"}})", "must be a boolean", "parameters.do_sample"},
      {R"({"inputs":"a","parameters":{"stop":["a","b","c","d","e"]}})", "at most 4", "parameters.stop"},
      {R"({"inputs":"a","parameters":{"decoder_input_details":1}})", "must be a boolean", "parameters.decoder_input_details"},
      {R"({"inputs":"a","parameters":{"top_n_tokens":21}})", "at most 20", "parameters.top_n_tokens"},
      {R"({"inputs":"a","parameters":{"watermark":true}})", "not supported", "parameters.watermark"},
      {R"({"inputs":"a","parameters":{"grammar":{"type":"ebnf","value":"x"}}})",
       "must be", "parameters.grammar.type"},
      {R"({"inputs":"a","parameters":{"best_of":2}})", "best_of", "parameters.best_of"},
      {R"({"inputs":"a","parameters":{"truncate":0}})", "at least 1", "parameters.truncate"},
      {R"({"inputs":"a","parameters":{"temperature":1e400}})", "number overflow", ""},
  };
  for (const Case& c : cases) {
    auto r = ParseGenerateRequest(c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(HttpStatusFor(r.status(), ApiFlavor::kTgi), 422) << c.body;
    EXPECT_TRUE(absl::StrContains(r.status().message(), c.message)) << c.body << " -> " << r.status();
    EXPECT_EQ(ParamOf(r.status()), c.param) << c.body;
  }
  Json error = Json::parse(TgiErrorJson(422, "x"));
  EXPECT_EQ(error["error"], "x");
  EXPECT_EQ(error["error_type"], "validation");
}

TEST(TgiApiTest, JsonGrammarIsTheJsonSchema) {
  auto r = ParseGenerateRequest(
      R"({"inputs":"a","parameters":{"grammar":{"type":"json","value":{"type":"object"}}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.sampling().json_schema(), R"({"type":"object"})");
}

TEST(TgiApiTest, GreedyUnlessSampling) {
  auto greedy = ParseGenerateRequest(R"({"inputs":"a","parameters":{"max_new_tokens":3,"watermark":false}})");
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  EXPECT_EQ(greedy->request.sampling().temperature(), 0.0f);
  EXPECT_TRUE(greedy->request.sampling().has_temperature());
  EXPECT_EQ(greedy->request.stopping().max_new_tokens(), 3);
  EXPECT_FALSE(greedy->request.stopping().max_new_tokens_to_limit());
  EXPECT_FALSE(greedy->request.stopping().ignore_eos());

  auto exact = ParseGenerateRequest(R"({"inputs":"a","parameters":{"ignore_eos":true}})");
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_TRUE(exact->request.stopping().ignore_eos());
  // No max_new_tokens: up to the context limit, as TGI (>= 1.1.1).
  EXPECT_FALSE(exact->request.stopping().has_max_new_tokens());
  EXPECT_TRUE(exact->request.stopping().max_new_tokens_to_limit());

  auto sampled = ParseGenerateRequest(
      R"({"inputs":"a","parameters":{"do_sample":true,"top_k":10,"seed":7,"details":true,"stop":["x"],"return_full_text":true}})");
  ASSERT_TRUE(sampled.ok()) << sampled.status();
  EXPECT_FALSE(sampled->request.sampling().has_temperature());  // server default 1.0
  EXPECT_EQ(sampled->request.sampling().top_k(), 10);
  EXPECT_EQ(sampled->request.sampling().seed(), 7u);
  EXPECT_EQ(sampled->request.sampling().logprobs(), 0);
  EXPECT_TRUE(sampled->details);
  EXPECT_TRUE(sampled->return_full_text);
  EXPECT_TRUE(sampled->request.stopping().include_stop_in_output())
      << "TGI's generated_text keeps the matched stop sequence";
  EXPECT_TRUE(sampled->request.stopping().stop_at_text_end())
      << "TGI stops only when the text ends with a stop sequence";
}

// A soak test's finding: an emoji split over two byte tokens came back in details.tokens as two
// U+FFFD halves, so the tokens' texts did not join into generated_text. They are now the stream's
// incremental texts: "" until the character is complete, then all of it.
TEST(TgiApiTest, DetailsTokensJoinIntoTheGeneratedText) {
  auto r = ParseGenerateRequest(R"({"inputs":"a","parameters":{"details":true}})");
  ASSERT_TRUE(r.ok());
  blossom::v1::GenerateResponse response;
  const std::string rocket = "\xF0\x9F\x9A\x80";  // U+1F680, 4 bytes
  response.set_text(" " + rocket + "!");
  auto add = [&](int id, const std::string& bytes, bool special = false) {
    auto* t = response.add_tokens();
    t->set_id(id);
    t->set_text(Utf8Lossy(bytes));  // what the server sends: the token's own bytes, lossy
    t->set_token_bytes(bytes);
    t->set_special(special);
  };
  add(10, " \xF0\x9F");
  add(11, "\x9A\x80");
  add(12, "!");
  add(2, "</s>", /*special=*/true);
  const Json tokens = GenerateResponse(*r, response)["details"]["tokens"];
  ASSERT_EQ(tokens.size(), 4u);
  EXPECT_EQ(tokens[0]["text"], " ");
  EXPECT_EQ(tokens[1]["text"], rocket);
  EXPECT_EQ(tokens[2]["text"], "!");
  EXPECT_EQ(tokens[3]["text"], "</s>");
  std::string joined;
  for (int i = 0; i < 3; ++i) joined += tokens[i]["text"].get<std::string>();
  EXPECT_EQ(joined, response.text());
  // A character the output ends inside of: U+FFFD, as generated_text has it.
  blossom::v1::GenerateResponse cut;
  cut.set_text("\xEF\xBF\xBD");  // the server's text decodes the cut character so too
  auto* t = cut.add_tokens();
  t->set_id(10);
  t->set_token_bytes("\xF0\x9F");
  EXPECT_EQ(GenerateResponse(*r, cut)["details"]["tokens"][0]["text"], "\xEF\xBF\xBD");
}

// A stop sequence matched inside a token ("ro" in "row") cuts generated_text there, as the stream
// cuts its last text: details.tokens' texts are cut the same way (a soak found " g" + "row").
TEST(TgiApiTest, DetailsTokensAreCutWhereAStopSequenceCutTheText) {
  auto r = ParseGenerateRequest(R"({"inputs":"a","parameters":{"details":true,"stop":["ro"]}})");
  ASSERT_TRUE(r.ok());
  blossom::v1::GenerateResponse response;
  response.set_text(" gro");
  for (const auto& [id, bytes] : std::vector<std::pair<int, std::string>>{{5, " g"}, {6, "row"}}) {
    auto* t = response.add_tokens();
    t->set_id(id);
    t->set_text(bytes);
    t->set_token_bytes(bytes);
  }
  const Json tokens = GenerateResponse(*r, response)["details"]["tokens"];
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_EQ(tokens[0]["text"], " g");
  EXPECT_EQ(tokens[1]["text"], "ro");
  // Nothing cut: the texts stay whole.
  response.set_text(" grow");
  EXPECT_EQ(GenerateResponse(*r, response)["details"]["tokens"][1]["text"], "row");
}

TEST(TgiApiTest, EncodesResponseAndStream) {
  auto r = ParseGenerateRequest(R"({"inputs":"Say","parameters":{"details":true,"return_full_text":true}})");
  ASSERT_TRUE(r.ok());
  blossom::v1::GenerateResponse response;
  response.set_text(" hi");
  auto* t = response.add_tokens();
  t->set_id(9);
  t->set_text(" hi");
  t->set_logprob(-0.25f);
  auto* eos = response.add_tokens();
  eos->set_id(2);
  eos->set_text("</s>");
  eos->set_special(true);  // the server marks the tokenizer's special tokens
  response.mutable_final()->set_finish_reason(blossom::v1::FINISH_REASON_EOS_TOKEN);
  response.mutable_final()->mutable_usage()->set_generated_tokens(2);
  Json j = GenerateResponse(*r, response);
  EXPECT_EQ(j["generated_text"], "Say hi");
  EXPECT_EQ(j["details"]["finish_reason"], "eos_token");
  EXPECT_EQ(j["details"]["tokens"][0]["id"], 9);
  EXPECT_EQ(j["details"]["tokens"][0]["special"], false);
  EXPECT_EQ(j["details"]["tokens"][1]["special"], true);
  EXPECT_TRUE(j["details"]["seed"].is_null());  // greedy
  // EOS on the last allowed token: TGI says "length" (it checks the length first).
  blossom::v1::GenerateResponse at_limit = response;
  at_limit.mutable_final()->set_max_new_tokens(2);
  EXPECT_EQ(GenerateResponse(*r, at_limit)["details"]["finish_reason"], "length");
  at_limit.mutable_final()->set_finish_reason(blossom::v1::FINISH_REASON_STOP_STRING);
  EXPECT_EQ(GenerateResponse(*r, at_limit)["details"]["finish_reason"], "length");
  at_limit.mutable_final()->set_max_new_tokens(3);
  EXPECT_EQ(GenerateResponse(*r, at_limit)["details"]["finish_reason"], "stop_sequence");

  StreamEncoder encoder(*r);
  blossom::v1::GenerateStreamResponse m1;
  m1.set_text_delta(" hi");
  *m1.mutable_token() = *t;
  std::string e1 = encoder.OnMessage(m1);
  ASSERT_TRUE(absl::StartsWith(e1, "data:"));
  Json j1 = Json::parse(e1.substr(5));
  EXPECT_EQ(j1["token"]["text"], " hi");
  EXPECT_TRUE(j1["generated_text"].is_null());
  EXPECT_FALSE(j1.contains("top_tokens"));  // TGI leaves an empty list out
  blossom::v1::GenerateStreamResponse m2;
  m2.mutable_final()->set_finish_reason(blossom::v1::FINISH_REASON_LENGTH);
  Json j2 = Json::parse(encoder.OnMessage(m2).substr(5));
  EXPECT_EQ(j2["generated_text"], "Say hi");
  EXPECT_EQ(j2["token"]["special"], true);
  EXPECT_EQ(j2["details"]["finish_reason"], "length");
}

// Stream events' token texts are the incremental decode (TGI's): "" for the first byte of a
// character split over byte tokens, the whole character with the last; joined they are the text.
TEST(TgiApiTest, StreamTokenTextsAreTheIncrementalDecode) {
  auto r = ParseGenerateRequest(R"({"inputs":"x","stream":true})");
  ASSERT_TRUE(r.ok()) << r.status();
  StreamEncoder encoder(*r);
  std::string joined;
  struct Piece {
    int32_t id;
    const char* own_text;  // the token's own (lossy) text
    const char* delta;     // the text the server streamed with it
    bool special;
  };
  const Piece pieces[] = {{162, "\xEF\xBF\xBD", "", false},
                          {228, "\xEF\xBF\xBD", "", false},
                          {109, "\xEF\xBF\xBD", "\xE2\x82\xAC", false},
                          {2, "</s>", "", true}};
  for (const Piece& p : pieces) {
    blossom::v1::GenerateStreamResponse m;
    m.mutable_token()->set_id(p.id);
    m.mutable_token()->set_text(p.own_text);
    m.mutable_token()->set_special(p.special);
    m.set_text_delta(p.delta);
    if (p.id == 2) m.mutable_final()->set_finish_reason(blossom::v1::FINISH_REASON_EOS_TOKEN);
    const Json event = Json::parse(encoder.OnMessage(m).substr(5));
    if (!event["token"]["special"].get<bool>()) joined += event["token"]["text"].get<std::string>();
    if (p.id == 109) {
      EXPECT_EQ(event["token"]["text"], "\xE2\x82\xAC");
    }
    if (p.id == 162) {
      EXPECT_EQ(event["token"]["text"], "");
    }
    if (p.id == 2) {
      EXPECT_EQ(event["token"]["text"], "</s>");
      EXPECT_EQ(event["generated_text"], joined);
    }
  }
  EXPECT_EQ(joined, "\xE2\x82\xAC");
}

// Before an error status the server sends the text it held back (a partial stop string, an
// incomplete character) in a message with neither token nor final: it must reach the client.
TEST(TgiApiTest, StreamDeliversTextReleasedBeforeAnError) {
  auto r = ParseGenerateRequest(R"({"inputs":"x","stream":true})");
  ASSERT_TRUE(r.ok()) << r.status();
  StreamEncoder encoder(*r);
  blossom::v1::GenerateStreamResponse held;
  held.set_text_delta("\xEF\xBF\xBD");
  const std::string sent = encoder.OnMessage(held);
  ASSERT_TRUE(absl::StartsWith(sent, "data:")) << sent;
  const Json event = Json::parse(sent.substr(5));
  EXPECT_EQ(event["token"]["text"], "\xEF\xBF\xBD");
  EXPECT_EQ(event["token"]["special"], false);
  EXPECT_TRUE(event["generated_text"].is_null());
  // A message carrying nothing gives no event.
  EXPECT_EQ(encoder.OnMessage(blossom::v1::GenerateStreamResponse()), "");
}

TEST(TgiApiTest, DecoderInputDetailsAndTopNTokens) {
  auto r = ParseGenerateRequest(
      R"({"inputs":"Say","parameters":{"details":true,"decoder_input_details":true,"top_n_tokens":2}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.sampling().prompt_logprobs(), 0);
  EXPECT_EQ(r->request.sampling().logprobs(), 2);
  // A response in text proto form: one generated token with one alternative, two prompt tokens.
  blossom::v1::GenerateResponse response;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(text: " hi"
           tokens { id: 9 text: " hi" logprob: -0.25
                    top_logprobs { token_id: 9 token: " hi" logprob: -0.25 } }
           prompt_logprobs { id: 5 text: "S" }
           prompt_logprobs { id: 6 text: "ay" logprob: -2.0 })pb",
      &response));
  const blossom::v1::Token* t = &response.tokens(0);
  Json j = GenerateResponse(*r, response);
  const Json& prefill = j["details"]["prefill"];
  ASSERT_EQ(prefill.size(), 2u);
  EXPECT_EQ(prefill[0]["id"], 5);
  EXPECT_TRUE(prefill[0]["logprob"].is_null());
  EXPECT_EQ(prefill[1]["text"], "ay");
  EXPECT_DOUBLE_EQ(prefill[1]["logprob"].get<double>(), -2.0);
  ASSERT_EQ(j["details"]["top_tokens"].size(), 1u);
  EXPECT_EQ(j["details"]["top_tokens"][0][0]["id"], 9);
  EXPECT_DOUBLE_EQ(j["details"]["top_tokens"][0][0]["logprob"].get<double>(), -0.25);

  StreamEncoder encoder(*r);
  blossom::v1::GenerateStreamResponse m1;
  *m1.mutable_token() = *t;
  Json j1 = Json::parse(encoder.OnMessage(m1).substr(5));
  EXPECT_EQ(j1["top_tokens"][0]["text"], " hi");
  // decoder_input_details alone asks for details too (TGI: details || decoder_input_details).
  auto no_details = ParseGenerateRequest(R"({"inputs":"Say","parameters":{"decoder_input_details":true}})");
  ASSERT_TRUE(no_details.ok());
  EXPECT_TRUE(no_details->details);
  EXPECT_TRUE(no_details->decoder_input_details);
  EXPECT_EQ(no_details->request.sampling().prompt_logprobs(), 0);
}

// TGI's choices where its defaults are not the obvious ones.
TEST(TgiApiTest, FollowsTgiDefaults) {
  // temperature 1 alone changes nothing: greedy (TGI's NextTokenChooser has no warper then).
  auto t1 = ParseGenerateRequest(R"({"inputs":"a","parameters":{"temperature":1.0}})");
  ASSERT_TRUE(t1.ok()) << t1.status();
  EXPECT_EQ(t1->request.sampling().temperature(), 0.0f);
  auto t07 = ParseGenerateRequest(R"({"inputs":"a","parameters":{"temperature":0.7}})");
  ASSERT_TRUE(t07.ok()) << t07.status();
  EXPECT_FLOAT_EQ(t07->request.sampling().temperature(), 0.7f);
  // POST / returns the full text unless told otherwise; /generate does not.
  EXPECT_TRUE(ParseGenerateRequest(R"({"inputs":"a"})", /*compat_route=*/true)->return_full_text);
  EXPECT_FALSE(ParseGenerateRequest(R"({"inputs":"a"})")->return_full_text);
  EXPECT_FALSE(ParseGenerateRequest(R"({"inputs":"a","parameters":{"return_full_text":false}})",
                                    /*compat_route=*/true)
                   ->return_full_text);
  // truncate: the last N input tokens, cut by the server.
  auto truncated = ParseGenerateRequest(R"({"inputs":"a","parameters":{"truncate":100}})");
  ASSERT_TRUE(truncated.ok()) << truncated.status();
  EXPECT_EQ(truncated->request.truncate_prompt_tokens(), 100);
}

// A stream with details asks for the chosen token's logprob (and only that: no alternatives), so
// every event's token carries one; without details none is asked (the CUDA backend would sample
// such rows on the host), and the token's logprob is null.
TEST(TgiApiTest, StreamTokensCarryTheirLogprobWithDetails) {
  auto stream = ParseGenerateRequest(R"({"inputs":"a","parameters":{"details":true}})",
                                     /*compat_route=*/false, /*stream=*/true);
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE(stream->request.sampling().has_logprobs());
  EXPECT_EQ(stream->request.sampling().logprobs(), 0);
  EXPECT_FALSE(stream->request.sampling().has_prompt_logprobs());
  auto top = ParseGenerateRequest(R"({"inputs":"a","parameters":{"top_n_tokens":3}})",
                                  /*compat_route=*/false, /*stream=*/true);
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_EQ(top->request.sampling().logprobs(), 3);
  EXPECT_FALSE(ParseGenerateRequest(R"({"inputs":"a"})", false, true)
                   ->request.sampling()
                   .has_logprobs());
  EXPECT_FALSE(ParseGenerateRequest(R"({"inputs":"a"})")->request.sampling().has_logprobs());

  StreamEncoder encoder(*stream);
  blossom::v1::GenerateStreamResponse m;
  m.set_text_delta("x");
  m.mutable_token()->set_id(4);
  m.mutable_token()->set_text("x");
  m.mutable_token()->set_logprob(-0.75f);
  const Json event = Json::parse(encoder.OnMessage(m).substr(5));
  EXPECT_DOUBLE_EQ(event["token"]["logprob"].get<double>(), -0.75);

  // The stream's own refusals, as TGI: no prefill list, no best_of.
  auto prefill = ParseGenerateRequest(
      R"({"inputs":"a","parameters":{"decoder_input_details":true}})", false, true);
  EXPECT_EQ(ParamOf(prefill.status()), "parameters.decoder_input_details");
  auto best_of = ParseGenerateRequest(
      R"({"inputs":"a","parameters":{"best_of":2,"do_sample":true}})", false, true);
  EXPECT_EQ(ParamOf(best_of.status()), "parameters.best_of");
}

TEST(TgiApiTest, SeedTakesTheWholeU64Range) {
  auto r = ParseGenerateRequest(
      R"({"inputs":"a","parameters":{"do_sample":true,"seed":18446744073709551615}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.sampling().seed(), 18446744073709551615ull);
}

TEST(TgiApiTest, Tokenize) {
  EXPECT_FALSE(ParseTokenizeRequest(R"({"inputs":3})").ok());
  auto r = ParseTokenizeRequest(R"({"inputs":"ab"})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->add_special_tokens());
  blossom::v1::TokenizeResponse response;
  response.add_ids(4);
  response.add_tokens("ab");
  auto* span = response.add_offsets();
  span->set_start(0);
  span->set_end(2);
  EXPECT_EQ(TokenizeResponse("ab", response),
            Json::parse(R"([{"id":4,"text":"ab","start":0,"stop":2}])"));
  // The text is the input's slice, not the vocabulary's spelling; "" where a token's bytes are
  // part of a character (byte-level tokens), as TGI.
  blossom::v1::TokenizeResponse split;
  const std::vector<std::tuple<int, std::string, int, int>> tokens = {
      {10, "Hel", 0, 3}, {11, "lo", 3, 5}, {12, "\xC4\xA0world", 5, 11}, {13, "x", 11, 12},
      {14, "y", 12, 13}, {15, "z", 13, 14}};
  for (const auto& [id, vocab, start, end] : tokens) {
    split.add_ids(id);
    split.add_tokens(vocab);
    auto* s = split.add_offsets();
    s->set_start(start);
    s->set_end(end);
  }
  const Json j = TokenizeResponse("Hello world\xE2\x82\xAC", split);
  EXPECT_EQ(j[0]["text"], "Hel");
  EXPECT_EQ(j[2]["text"], " world");
  EXPECT_EQ(j[3]["text"], "");  // the euro sign's first byte
  EXPECT_EQ(j[5]["text"], "");  // its last
  EXPECT_EQ(j[5]["stop"], 14);
}

}  // namespace
}  // namespace blossom::gateway::tgi
