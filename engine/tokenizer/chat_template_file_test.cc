// FindChatTemplateFile on model directories laid out as transformers saves them.
#include "engine/tokenizer/chat_template_file.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace blossom {
namespace {

std::string FreshDir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(ChatTemplateFileTest, NoneInABloomDirectory) {
  const std::string dir = FreshDir("bloom");
  EXPECT_EQ(FindChatTemplateFile(dir), "");
  std::ofstream(dir + "/tokenizer_config.json")
      << R"({"add_prefix_space": false, "model_max_length": 1000000000000000019884624838656,
            "tokenizer_class": "BloomTokenizer", "chat_template": null})";
  EXPECT_EQ(FindChatTemplateFile(dir), "");
  std::ofstream(dir + "/tokenizer_config.json") << R"({"chat_template": ""})";
  EXPECT_EQ(FindChatTemplateFile(dir), "");
  // Unparsable: the tokenizer's loading names that problem, not this.
  std::ofstream(dir + "/tokenizer_config.json") << "{";
  EXPECT_EQ(FindChatTemplateFile(dir), "");
}

TEST(ChatTemplateFileTest, TemplateInTokenizerConfig) {
  const std::string dir = FreshDir("in-config");
  std::ofstream(dir + "/tokenizer_config.json")
      << R"({"chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"})";
  EXPECT_EQ(FindChatTemplateFile(dir), dir + "/tokenizer_config.json");
  // Named templates (a list of {name, template}), as some tool-calling models save them.
  std::ofstream(dir + "/tokenizer_config.json")
      << R"({"chat_template": [{"name": "default", "template": "{{ messages }}"}]})";
  EXPECT_EQ(FindChatTemplateFile(dir), dir + "/tokenizer_config.json");
}

TEST(ChatTemplateFileTest, TemplateInItsOwnFile) {
  const std::string dir = FreshDir("own-file");
  std::ofstream(dir + "/tokenizer_config.json") << R"({"add_prefix_space": false})";
  std::ofstream(dir + "/chat_template.jinja") << "{{ messages }}";
  EXPECT_EQ(FindChatTemplateFile(dir), dir + "/chat_template.jinja");
  std::filesystem::remove(dir + "/chat_template.jinja");
  std::ofstream(dir + "/chat_template.json") << R"({"chat_template": "{{ messages }}"})";
  EXPECT_EQ(FindChatTemplateFile(dir), dir + "/chat_template.json");
}

}  // namespace
}  // namespace blossom
