// Structured-output requests as OpenAI, vLLM and TGI spell them, turned into the blossom.v1
// sampling fields guided_choice, json_schema, json_compact, regex and grammar:
//   - OpenAI: response_format {"type": "text" | "json_object" | "json_schema", "json_schema":
//     {"name", "schema", "strict"}} (TGI's {"type": "json", "value": schema} too);
//   - vLLM: guided_choice, guided_json, guided_regex, guided_grammar (GBNF), and
//     structured_outputs {"choice", "json", "regex", "grammar", "json_object",
//     "disable_any_whitespace", ...}; structured_outputs' structural_tag is refused, as is a
//     whitespace pattern;
//   - llama.cpp's server: grammar (GBNF text) and json_schema (a schema);
//   - TGI: parameters.grammar {"type": "json" | "json_object" | "json_schema" | "regex",
//     "value": ...}.
// One request asks for one constraint at most. The server compiles the schema and refuses what
// it cannot enforce (proto/blossom/v1/blossom.proto lists the keywords).
#ifndef BLOSSOM_CLIENTS_GATEWAY_STRUCTURED_OUTPUTS_H_
#define BLOSSOM_CLIENTS_GATEWAY_STRUCTURED_OUTPUTS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "clients/gateway/json_fields.h"
#include "proto/blossom/v1/blossom.pb.h"

namespace blossom::gateway {

// The server's limits, checked here so that a refusal names the client's field.
inline constexpr size_t kMaxGuidedChoices = 256;
inline constexpr size_t kMaxJsonSchemaBytes = 64 * 1024;
inline constexpr size_t kMaxRegexBytes = 16 * 1024;
inline constexpr size_t kMaxGrammarBytes = 64 * 1024;

// The OpenAI/vLLM fields of a completions or chat body. `raw_body` is the text `body` was
// parsed from: a schema given as an object is passed on with its keys in their order there (Json
// sorts them, and the output follows a schema's property order).
// `param` (optional) gets the client's field that gave the constraint ("" for none).
absl::Status ParseStructuredOutputs(const Json& body, absl::string_view raw_body,
                                    blossom::v1::SamplingParameters* sampling,
                                    std::string* param = nullptr);

// TGI's parameters.grammar (errors name "parameters.grammar"); `raw_body` as above.
absl::Status ParseTgiGrammar(const Json& parameters, absl::string_view raw_body,
                             blossom::v1::SamplingParameters* sampling);

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_STRUCTURED_OUTPUTS_H_
