#include "server/tokenize_rpc.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/text/utf8.h"
#include "server/status_details.h"

namespace blossom {
namespace {

absl::Status Refused(absl::Status status, absl::string_view field, absl::string_view reason) {
  const std::string message(status.message());
  return WithReason(WithFieldViolation(std::move(status), field, message), reason);
}

}  // namespace

absl::Status TokenizeText(const Tokenizer& tokenizer, const v1::TokenizeRequest& request,
                          int32_t max_tokens, int32_t max_total_tokens,
                          v1::TokenizeResponse* response) {
  if (FindInvalidUtf8(request.text()) != absl::string_view::npos) {
    return Refused(absl::InvalidArgumentError("text is not valid UTF-8"), "text",
                   error_reason::kInvalidPrompt);
  }
  auto ids = tokenizer.Encode(request.text());
  if (!ids.ok()) return ids.status();
  if (static_cast<int64_t>(ids->size()) > max_tokens) {
    return Refused(absl::OutOfRangeError(absl::StrCat("text is too long to tokenize: ",
                                                      ids->size(), " tokens, at most ",
                                                      max_tokens)),
                   "text", error_reason::kPromptTooLong);
  }
  // Byte offsets from each token's decoded bytes: exact for byte-level BPE, whose decode
  // reproduces the input; if it does not (a normalizer changed the text) offsets are omitted.
  std::string rebuilt;
  std::vector<std::pair<int32_t, int32_t>> spans;
  for (int32_t id : *ids) {
    response->add_ids(id);
    response->add_tokens(tokenizer.IdToToken(id).value_or(""));
    const int32_t begin = static_cast<int32_t>(rebuilt.size());
    absl::string_view bytes = tokenizer.DecodedBytes(id, /*skip_special_tokens=*/false);
    rebuilt.append(bytes.data(), bytes.size());
    spans.emplace_back(begin, static_cast<int32_t>(rebuilt.size()));
  }
  if (rebuilt == request.text()) {
    for (const auto& [begin, end] : spans) {
      v1::Span* span = response->add_offsets();
      span->set_start(begin);
      span->set_end(end);
    }
  }
  response->set_max_total_tokens(max_total_tokens);
  return absl::OkStatus();
}

absl::Status DetokenizeIds(const Tokenizer& tokenizer, const v1::DetokenizeRequest& request,
                           int32_t vocab_size, int32_t max_tokens,
                           v1::DetokenizeResponse* response) {
  if (request.ids_size() > max_tokens) {
    return Refused(absl::OutOfRangeError(absl::StrCat("ids: ", request.ids_size(),
                                                      " tokens, at most ", max_tokens)),
                   "ids", error_reason::kPromptTooLong);
  }
  for (int i = 0; i < request.ids_size(); ++i) {
    const int32_t id = request.ids(i);
    if (id < 0 || id >= vocab_size) {
      return Refused(absl::InvalidArgumentError(absl::StrCat(
                         "ids[", i, "] = ", id, " is outside the vocabulary [0, ", vocab_size, ")")),
                     "ids", error_reason::kInvalidPrompt);
    }
  }
  response->set_text(tokenizer.Decode(
      absl::MakeConstSpan(request.ids().data(), static_cast<size_t>(request.ids_size())),
      request.skip_special_tokens()));
  return absl::OkStatus();
}

}  // namespace blossom
