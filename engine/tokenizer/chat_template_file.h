// Whether a Hugging Face model directory ships a chat template, and where.
//
// transformers' apply_chat_template renders chats with a Jinja template the model was tuned on.
// Blossom does not run Jinja: its gateway renders chats with a prefix/suffix layout of its own
// (clients/gateway/chat_template.h). A model that ships a template may expect another layout,
// so the server says so at start instead of formatting its chats otherwise without a word.
#ifndef BLOSSOM_ENGINE_TOKENIZER_CHAT_TEMPLATE_FILE_H_
#define BLOSSOM_ENGINE_TOKENIZER_CHAT_TEMPLATE_FILE_H_

#include <string>

namespace blossom {

// The file in `model_dir` that holds a chat template: tokenizer_config.json with a non-empty
// "chat_template" (a string, or a list of named templates), or the chat_template.jinja or
// chat_template.json that transformers 4.43 and later save beside it. Empty when there is none
// (BLOOM's own tokenizers ship none), or when tokenizer_config.json cannot be parsed (loading
// the tokenizer reports that).
std::string FindChatTemplateFile(const std::string& model_dir);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_TOKENIZER_CHAT_TEMPLATE_FILE_H_
