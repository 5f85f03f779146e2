// The chat prompt layout of /v1/chat/completions: BLOOM tokenizers ship no chat template, so
// the gateway renders messages into one text prompt with per-role prefix and suffix strings,
// loaded from the file given as --chat-template (JSON, documented in README.md):
//
//   {"system_prefix": "", "system_separator": "\n", "system_suffix": "\n\n",
//    "user_prefix": "User: ", "user_suffix": "\n",
//    "assistant_prefix": "Assistant: ", "assistant_suffix": "\n",
//    "generation_prompt": "Assistant:"}
//
// Rendering: the system (and developer) messages, joined by system_separator, and the tools'
// specs after tools_prefix when a request calls functions, wrapped in system_prefix/
// system_suffix, come first (nothing at all when their text is empty); then each user,
// assistant and tool message in order as prefix + content + suffix (an assistant's tool_calls
// follow its content as a JSON list of {"name", "parameters"}, the form a "required" call is
// generated in); then generation_prompt, after which the model continues. Every key is optional (the values above are the defaults, which is
// the layout the gateway always had); an unknown key or a non-string value is an error, so a
// typo cannot silently fall back to a default.
//
// Immutable after loading; safe to share between threads.
#ifndef BLOSSOM_CLIENTS_GATEWAY_CHAT_TEMPLATE_H_
#define BLOSSOM_CLIENTS_GATEWAY_CHAT_TEMPLATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "clients/gateway/json_fields.h"

namespace blossom::gateway {

struct ChatTemplate {
  std::string system_prefix;
  std::string system_separator = "\n";
  std::string system_suffix = "\n\n";
  std::string user_prefix = "User: ";
  std::string user_suffix = "\n";
  std::string assistant_prefix = "Assistant: ";
  std::string assistant_suffix = "\n";
  std::string generation_prompt = "Assistant:";
  // Function calling: the tools' specs (one JSON object a line) after this, at the end of the
  // system block; tool results (role "tool") between tool_prefix and tool_suffix.
  std::string tools_prefix = "Functions (JSON):\n";
  std::string tool_prefix = "Tool: ";
  std::string tool_suffix = "\n";

  // Parses the JSON form above. InvalidArgument names the offending key.
  static absl::StatusOr<ChatTemplate> FromJson(absl::string_view json);
  // Reads and parses a template file (at most 64 KiB).
  static absl::StatusOr<ChatTemplate> FromFile(const std::string& path);
};

// vLLM's chat request options that change the rendering.
struct ChatRenderOptions {
  // false: no generation_prompt at the end (the caller adds its own continuation cue).
  bool add_generation_prompt = true;
  // true: the last message (an assistant one) is left open, without its suffix and without a
  // generation prompt, so the model continues it (prefilling the start of an answer).
  bool continue_final_message = false;
  // Function specs to render (tool_calls.h), each a compact JSON object.
  std::vector<std::string> tools;
};

// vLLM's add_generation_prompt (default: true unless continue_final_message) and
// continue_final_message (default false) from a request body; both true is a FieldError.
absl::StatusOr<ChatRenderOptions> ParseChatRenderOptions(const Json& body);

// Renders OpenAI chat `messages` (roles system, developer, user, assistant, tool; content a
// string or text parts, whose texts are joined by "\n" as vLLM joins them) with `chat_template`. FieldErrors name messages[i] (or continue_final_message when
// the last message is not the assistant's).
absl::StatusOr<std::string> RenderChatPrompt(const Json& messages,
                                             const ChatTemplate& chat_template,
                                             const ChatRenderOptions& options = {});

// vLLM's chat echo: the last message's text when its role is `role` (the answer's; "" for any
// role), which the answer then starts with; "" otherwise. `messages` as RenderChatPrompt
// accepted them.
std::string EchoedLastMessage(const Json& messages, const std::string& role);

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_CHAT_TEMPLATE_H_
