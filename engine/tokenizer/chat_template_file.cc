#include "engine/tokenizer/chat_template_file.h"

#include "absl/status/statusor.h"
#include "engine/loader/file_util.h"
#include "nlohmann/json.hpp"

namespace blossom {

std::string FindChatTemplateFile(const std::string& model_dir) {
  const std::string config_path = JoinPath(model_dir, "tokenizer_config.json");
  if (absl::StatusOr<std::string> text = ReadFileToString(config_path); text.ok()) {
    const nlohmann::json config = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (config.is_object()) {
      const auto it = config.find("chat_template");
      if (it != config.end() && ((it->is_string() && !it->get<std::string>().empty()) ||
                                 (it->is_array() && !it->empty()))) {
        return config_path;
      }
    }
  }
  for (const char* name : {"chat_template.jinja", "chat_template.json"}) {
    const std::string path = JoinPath(model_dir, name);
    if (GetPathKind(path) == PathKind::kRegularFile) return path;
  }
  return "";
}

}  // namespace blossom
