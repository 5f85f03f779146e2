// OpenAI function calling on the chat route, by structured output: with tool_choice naming a
// function, or "required", the output is constrained to JSON (the function's parameters, or a
// list of {"name", "parameters"} calls) and answered as the message's tool_calls, as vLLM does.
//
// tool_choice "auto" (the default with tools) lets the model decide between text and calls,
// which needs a parser of the model's own call format; BLOOM models have none, so it is a 400
// naming tool_choice (vLLM answers the same without --tool-call-parser). "none" generates text.
// The tools' function specs are rendered into the prompt (chat_template.h) so the model knows
// them.
#ifndef BLOSSOM_CLIENTS_GATEWAY_TOOL_CALLS_H_
#define BLOSSOM_CLIENTS_GATEWAY_TOOL_CALLS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "clients/gateway/json_fields.h"

namespace blossom::gateway {

inline constexpr size_t kMaxTools = 128;

struct ToolChoice {
  enum class Mode { kNone, kNamed, kRequired };
  Mode mode = Mode::kNone;
  std::string function;  // kNamed: its name
};

struct ParsedTools {
  ToolChoice choice;
  // Each tool's function spec ({"name", "description", "parameters"}) as compact JSON in the
  // body's key order, for the prompt; empty with tool_choice "none".
  std::vector<std::string> rendered;
  // The JSON Schema the output follows (kNamed, kRequired), or empty, and the client's field it
  // came from (tools[i].function.parameters, or tools for "required").
  std::string schema;
  std::string param;
};

// `tools` and `tool_choice` of a chat body (`raw_body` is its text: schemas keep their key
// order). FieldErrors name tools[i]... or tool_choice.
absl::StatusOr<ParsedTools> ParseTools(const Json& body, absl::string_view raw_body);

// The message's tool_calls for a choice's generated `text` ([{"id", "type": "function",
// "function": {"name", "arguments"}}]; a named call's arguments are the text as generated, a
// required list's each call's parameters as compact JSON in the generated key order), or
// nullopt when `text` is not a whole call (the output was cut short). Ids are
// "call_<id_prefix>_<k>".
absl::optional<Json> ToolCallsJson(const ToolChoice& choice, absl::string_view text,
                                   absl::string_view id_prefix);

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_TOOL_CALLS_H_
