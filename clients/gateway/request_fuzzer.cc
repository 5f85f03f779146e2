// libFuzzer entry point (tools/fuzz/fuzz.bzl): a request body for one gateway route (the first
// byte picks OpenAI completions, chat completions, TGI generate, tokenize (TGI's or vLLM's) or
// vLLM's detokenize). Parsing must end in
// a request or a FieldError, never a crash or an exception; an accepted request must render a
// response (from an empty generation) without one.
#include <cstdint>

#include "clients/gateway/json_fields.h"
#include "clients/gateway/openai_api.h"
#include "clients/gateway/tgi_api.h"
#include "clients/gateway/vllm_api.h"

namespace oa = blossom::gateway::openai;
namespace tgi = blossom::gateway::tgi;
namespace vllm = blossom::gateway::vllm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const blossom::v1::GenerateResponse empty;
  switch (data[0] % 5) {
    case 0:
    case 1: {
      auto request = data[0] % 5 == 0 ? oa::ParseCompletionRequest(body) : oa::ParseChatRequest(body);
      if (request.ok()) blossom::gateway::Dump(oa::CompletionResponse(*request, empty, "cmpl-fuzz", 0));
      break;
    }
    case 2: {
      auto request = tgi::ParseGenerateRequest(body);
      if (request.ok()) blossom::gateway::Dump(tgi::GenerateResponse(*request, empty));
      break;
    }
    case 3: {
      auto json = blossom::gateway::ParseJsonObject(body);
      if (json.ok() && vllm::IsTokenizeRequest(*json)) {
        auto call = vllm::ParseTokenizeRequest(*json, {});
        if (call.ok()) blossom::gateway::Dump(vllm::TokenizeResponse(*call, {}));
      } else {
        tgi::ParseTokenizeRequest(body).IgnoreError();
      }
      break;
    }
    default:
      vllm::ParseDetokenizeRequest(body).IgnoreError();
  }
  return 0;
}
