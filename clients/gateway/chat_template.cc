#include "clients/gateway/chat_template.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/optional.h"
#include "engine/loader/json_util.h"
#include "kernels/status_macros.h"

namespace blossom::gateway {
namespace {

constexpr size_t kMaxTemplateFileBytes = 64 << 10;

// The content of message `m` (`where` names it in errors): a string or a list of text parts.
absl::StatusOr<std::string> MessageText(const Json& m, const std::string& where,
                                        const std::string& role) {
  auto content = m.find("content");
  if (content == m.end() || content->is_null()) {
    // An assistant turn that only called tools has no content; nothing else may lack it.
    if (role != "assistant") return FieldError(where + ".content", "is required");
    return std::string();
  }
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) {
    return FieldError(where + ".content", "must be a string or a list of content parts");
  }
  // The parts' texts joined by "\n", as vLLM joins a message's text parts.
  std::string text;
  for (size_t j = 0; j < content->size(); ++j) {
    const Json& part = (*content)[j];
    const std::string pwhere = absl::StrCat(where, ".content[", j, "]");
    if (!part.is_object()) return FieldError(pwhere, "must be an object");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string() || *type != "text") {
      return FieldError(pwhere + ".type", "only text content parts are supported");
    }
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) return FieldError(pwhere + ".text", "must be a string");
    if (j > 0) text += '\n';
    text += t->get<std::string>();
  }
  return text;
}

// An assistant message's tool_calls as the JSON list the model generates them in
// ([{"name", "parameters"}], arguments parsed where they are JSON), or "" without any.
absl::StatusOr<std::string> ToolCallsText(const Json& m, const std::string& where) {
  auto calls = m.find("tool_calls");
  if (calls == m.end() || calls->is_null()) return std::string();
  if (!calls->is_array()) return FieldError(where + ".tool_calls", "must be a list");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t j = 0; j < calls->size(); ++j) {
    const Json& call = (*calls)[j];
    const std::string cwhere = absl::StrCat(where, ".tool_calls[", j, "]");
    const Json* function = call.is_object() && call.contains("function") ? &call["function"]
                                                                          : nullptr;
    if (function == nullptr || !function->is_object() || !function->contains("name") ||
        !(*function)["name"].is_string()) {
      return FieldError(cwhere + ".function.name", "must be a string");
    }
    const Json arguments = function->value("arguments", Json(""));
    if (!arguments.is_string()) {
      return FieldError(cwhere + ".function.arguments", "must be a string (JSON text)");
    }
    const std::string& text = arguments.get_ref<const std::string&>();
    nlohmann::ordered_json parsed =
        JsonNestingWithin(text)  // deeper arguments are rendered as text
            ? nlohmann::ordered_json::parse(text, nullptr, false)
            : nlohmann::ordered_json(nlohmann::ordered_json::value_t::discarded);
    out.push_back({{"name", (*function)["name"].get<std::string>()},
                   {"parameters", parsed.is_discarded() ? nlohmann::ordered_json(text) : parsed}});
  }
  return out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromJson(absl::string_view json) {
  BLOSSOM_ASSIGN_OR_RETURN(Json object, ParseJsonObject(json));
  ChatTemplate out;
  const std::pair<const char*, std::string*> keys[] = {
      {"system_prefix", &out.system_prefix},
      {"system_separator", &out.system_separator},
      {"system_suffix", &out.system_suffix},
      {"user_prefix", &out.user_prefix},
      {"user_suffix", &out.user_suffix},
      {"assistant_prefix", &out.assistant_prefix},
      {"assistant_suffix", &out.assistant_suffix},
      {"generation_prompt", &out.generation_prompt},
      {"tools_prefix", &out.tools_prefix},
      {"tool_prefix", &out.tool_prefix},
      {"tool_suffix", &out.tool_suffix},
  };
  for (const auto& [key, value] : object.items()) {
    bool known = false;
    for (const auto& [name, field] : keys) {
      if (key != name) continue;
      known = true;
      if (!value.is_string()) return FieldError(name, "must be a string");
      *field = value.get<std::string>();
    }
    if (!known) return FieldError(key.substr(0, 64), "is not a chat template key");
  }
  return out;
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read chat template ", path));
  std::string text(kMaxTemplateFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxTemplateFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template ", path, " is larger than ", kMaxTemplateFileBytes, " bytes"));
  }
  absl::StatusOr<ChatTemplate> parsed = FromJson(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template ", path, ": ", parsed.status().message()));
  }
  return parsed;
}

absl::StatusOr<std::string> RenderChatPrompt(const Json& messages,
                                             const ChatTemplate& chat_template,
                                             const ChatRenderOptions& options) {
  if (!messages.is_array()) return FieldError("messages", "must be a list of messages");
  if (messages.empty()) return FieldError("messages", "must not be empty");
  std::string system, turns;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return FieldError(where, "must be an object");
    absl::optional<std::string> role;
    absl::Status s = GetString(m, "role", &role);
    if (!s.ok() || !role) return FieldError(where + ".role", "must be a string");
    const bool known_role = *role == "system" || *role == "developer" || *role == "user" ||
                            *role == "assistant" || *role == "tool";
    if (!known_role) {
      return FieldError(where + ".role", "must be one of system, developer, user, assistant, tool");
    }
    BLOSSOM_ASSIGN_OR_RETURN(std::string text, MessageText(m, where, *role));
    if (*role == "assistant") {
      BLOSSOM_ASSIGN_OR_RETURN(std::string calls, ToolCallsText(m, where));
      if (!calls.empty()) text += text.empty() ? calls : " " + calls;
    }
    if (*role == "system" || *role == "developer") {
      if (!system.empty() && !text.empty()) system += chat_template.system_separator;
      system += text;
    } else if (*role == "user") {
      absl::StrAppend(&turns, chat_template.user_prefix, text, chat_template.user_suffix);
    } else if (*role == "tool") {
      absl::optional<std::string> call_id;
      if (!GetString(m, "tool_call_id", &call_id).ok() || !call_id) {
        return FieldError(where + ".tool_call_id", "is required for a tool message");
      }
      absl::StrAppend(&turns, chat_template.tool_prefix, text, chat_template.tool_suffix);
    } else if (options.continue_final_message && i + 1 == messages.size()) {
      absl::StrAppend(&turns, chat_template.assistant_prefix, text);  // left open
    } else {
      absl::StrAppend(&turns, chat_template.assistant_prefix, text,
                      chat_template.assistant_suffix);
    }
    if (options.continue_final_message && i + 1 == messages.size() && *role != "assistant") {
      return FieldError("continue_final_message",
                        "needs the last message to be the assistant's (the one continued)");
    }
  }
  if (!options.tools.empty()) {
    if (!system.empty()) system += chat_template.system_separator;
    absl::StrAppend(&system, chat_template.tools_prefix, absl::StrJoin(options.tools, "\n"));
  }
  std::string prompt;
  if (!system.empty()) {
    absl::StrAppend(&prompt, chat_template.system_prefix, system, chat_template.system_suffix);
  }
  absl::StrAppend(&prompt, turns);
  if (options.add_generation_prompt && !options.continue_final_message) {
    absl::StrAppend(&prompt, chat_template.generation_prompt);
  }
  return prompt;
}

absl::StatusOr<ChatRenderOptions> ParseChatRenderOptions(const Json& body) {
  absl::optional<bool> add_generation_prompt, continue_final_message;
  BLOSSOM_RETURN_IF_ERROR(GetBool(body, "add_generation_prompt", &add_generation_prompt));
  BLOSSOM_RETURN_IF_ERROR(GetBool(body, "continue_final_message", &continue_final_message));
  ChatRenderOptions render;
  render.continue_final_message = continue_final_message.value_or(false);
  render.add_generation_prompt = add_generation_prompt.value_or(!render.continue_final_message);
  if (render.add_generation_prompt && render.continue_final_message) {
    return FieldError("continue_final_message",
                      "cannot be true together with add_generation_prompt (vLLM's rule)");
  }
  return render;
}

std::string EchoedLastMessage(const Json& messages, const std::string& role) {
  if (!messages.is_array() || messages.empty() || !messages.back().is_object()) return "";
  const Json& last = messages.back();
  auto r = last.find("role");
  if (r == last.end() || !r->is_string() || (!role.empty() && *r != role)) return "";
  absl::StatusOr<std::string> text = MessageText(last, "messages", r->get<std::string>());
  return text.ok() ? *std::move(text) : "";
}

}  // namespace blossom::gateway
