#include "engine/tokenizer/chat_template_file.h"

#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"

namespace blossom {
namespace {

bool IsFile(const std::string& path) { return std::ifstream(path, std::ios::binary).good(); }

}  // namespace

std::string FindChatTemplateFile(const std::string& model_dir) {
  const std::string config_path = model_dir + "/tokenizer_config.json";
  if (std::ifstream in(config_path, std::ios::binary); in) {
    std::ostringstream contents;
    contents << in.rdbuf();
    const nlohmann::json config =
        nlohmann::json::parse(contents.str(), nullptr, /*allow_exceptions=*/false);
    if (config.is_object()) {
      const auto it = config.find("chat_template");
      if (it != config.end() && ((it->is_string() && !it->get<std::string>().empty()) ||
                                 (it->is_array() && !it->empty()))) {
        return config_path;
      }
    }
  }
  for (const char* name : {"chat_template.jinja", "chat_template.json"}) {
    const std::string path = model_dir + "/" + name;
    if (IsFile(path)) return path;
  }
  return "";
}

}  // namespace blossom
