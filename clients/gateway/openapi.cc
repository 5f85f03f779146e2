#include "clients/gateway/openapi.h"

namespace blossom::gateway {

const std::string& OpenApiJson() {
  // Schemas list the fields the gateway reads; unknown fields are ignored (see README.md).
  static const std::string* document = new std::string(R"json({
  "openapi": "3.0.3",
  "info": {
    "title": "blossom-gateway",
    "version": "1",
    "description": "OpenAI- and TGI-compatible HTTP in front of the Blossom gRPC server. Every route but /live and /health needs 'Authorization: Bearer <key>' when the gateway has API keys (/metrics also takes a scrape key). Request bodies are JSON: a POST whose Content-Type is present and is not application/json (or application/*+json) is refused with 415."
  },
  "components": {
    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    "parameters": {
      "RequestId": {"name": "X-Request-Id", "in": "header", "required": false, "schema": {"type": "string", "minLength": 1, "maxLength": 124, "pattern": "^[A-Za-z0-9_.:/+=@-]+$"},
        "description": "The request's id: sent to the server (its logs), in the OpenAI id (cmpl-<id>, chatcmpl-<id>) and in the X-Request-Id header of every answer, errors included. Another value (too long, spaces, quotes, control or non-ASCII bytes) is ignored, not refused: the gateway makes a fresh id, as it does without the header."}
    },
    "headers": {
      "RequestId": {"description": "The request's id: the client's X-Request-Id when it was taken, else the gateway's own (also on error answers)", "schema": {"type": "string"}}
    },
    "schemas": {
      "OpenAIError": {"type": "object", "properties": {"error": {"type": "object", "properties": {
        "message": {"type": "string"}, "type": {"type": "string"},
        "param": {"type": "string", "nullable": true}, "code": {"type": "string", "nullable": true}}}}},
      "TgiError": {"type": "object", "properties": {"error": {"type": "string"}, "error_type": {"type": "string"}}},
      "Stop": {"oneOf": [{"type": "string"}, {"type": "array", "maxItems": 16, "items": {"type": "string", "minLength": 1}}]},
      "CompletionRequest": {"type": "object", "required": ["prompt"], "properties": {
        "model": {"type": "string", "maxLength": 256},
        "prompt": {"oneOf": [{"type": "string", "minLength": 1},
                             {"type": "array", "minItems": 1, "maxItems": 128, "items": {"type": "string", "minLength": 1}},
                             {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
                             {"type": "array", "minItems": 1, "maxItems": 128, "items": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}}],
                   "description": "a list of prompts: one choice each (n per prompt; at most 128 choices; not with stream)"},
        "n": {"type": "integer", "minimum": 1, "maximum": 128}, "echo": {"type": "boolean"},
        "best_of": {"type": "integer", "minimum": 1, "maximum": 128, "description": "OpenAI's: candidates sampled per prompt (>= n; prompts x best_of <= 128), the n with the highest mean token logprob returned, best first (not with stream)"},
        "truncate_prompt_tokens": {"type": "integer", "minimum": 1, "description": "vLLM's: keep the last N prompt tokens"},
        "max_tokens": {"type": "integer", "minimum": 0, "nullable": true, "description": "absent: 16 (OpenAI's default); null: up to the context limit (vLLM); 0 only with echo (the prompt scored)"},
        "temperature": {"type": "number", "minimum": 0, "maximum": 100},
        "top_p": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "maximum": 1},
        "typical_p": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "maximum": 1},
        "top_k": {"type": "integer", "minimum": -1}, "min_p": {"type": "number", "minimum": 0, "maximum": 1},
        "frequency_penalty": {"type": "number", "minimum": -2, "maximum": 2},
        "presence_penalty": {"type": "number", "minimum": -2, "maximum": 2},
        "repetition_penalty": {"type": "number", "exclusiveMinimum": true, "minimum": 0}, "seed": {"type": "integer"},
        "stop": {"$ref": "#/components/schemas/Stop"}, "logprobs": {"type": "integer", "minimum": 0, "maximum": 20},
        "prompt_logprobs": {"type": "integer", "minimum": 0, "maximum": 20, "description": "vLLM's: each prompt token's logprob, rank and N alternatives, on each choice (above 0 not with stream)"},
        "logit_bias": {"type": "object", "maxProperties": 300, "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}, "description": "token id (as a string) -> bias added to its logit"},
        "allowed_token_ids": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}, "description": "vLLM's: only these tokens are generated"},
        "bad_words": {"type": "array", "maxItems": 64, "items": {"type": "string", "minLength": 1}, "description": "vLLM's: never generated"},
        "guided_choice": {"type": "array", "minItems": 1, "maxItems": 256, "items": {"type": "string", "minLength": 1}, "description": "vLLM's: the output is one of these (not with ignore_eos or min_tokens)"},
        "guided_json": {"oneOf": [{"type": "object"}, {"type": "string"}], "description": "vLLM's: a JSON Schema (or its text) the output follows, ended by EOS; keywords that constrain values beyond type, properties, required, additionalProperties, items, minItems, maxItems, minLength, maxLength, enum, const, anyOf, oneOf and $ref are refused"},
        "response_format": {"oneOf": [
          {"type": "object", "required": ["type"], "properties": {"type": {"type": "string", "enum": ["text", "json_object"]}}},
          {"type": "object", "required": ["type", "json_schema"], "properties": {"type": {"type": "string", "enum": ["json_schema"]}, "json_schema": {"type": "object", "properties": {"name": {"type": "string"}, "schema": {"type": "object"}, "strict": {"type": "boolean"}}}}}],
          "description": "OpenAI's: json_object = any JSON object; json_schema = the schema's (as guided_json)"},
        "guided_regex": {"type": "string", "minLength": 1, "maxLength": 16384, "description": "vLLM's: the whole output matches this regular expression (no backreferences, lookaround, \\b or flags), ended by EOS"},
        "guided_grammar": {"type": "string", "minLength": 1, "maxLength": 65536, "description": "vLLM's (llama.cpp's GBNF): the whole output is a root of this context-free grammar (rules name ::= ..., literals, character classes, groups, * + ? {m,n}; no left recursion), ended by EOS"},
        "grammar": {"type": "string", "minLength": 1, "maxLength": 65536, "description": "llama.cpp's server's spelling of guided_grammar"},
        "json_schema": {"type": "object", "description": "llama.cpp's server's spelling of guided_json"},
        "structured_outputs": {"type": "object", "properties": {"choice": {"type": "array", "minItems": 1, "maxItems": 256, "items": {"type": "string", "minLength": 1}}, "json": {"type": "object"}, "regex": {"type": "string", "minLength": 1}, "grammar": {"type": "string", "minLength": 1}, "json_object": {"type": "boolean"}, "disable_any_whitespace": {"type": "boolean"}}, "description": "vLLM's newer spelling of guided_choice, guided_json, guided_regex and guided_grammar; one constraint per request"},
        "skip_special_tokens": {"type": "boolean", "description": "vLLM's: false keeps special tokens in the text (default true)"},
        "use_beam_search": {"type": "boolean", "description": "vLLM's: beam search as transformers' generate(num_beams=n): the n beams are the choices, best first (n <= 10; not with stream, sampling, stop strings, structured outputs or echo)"},
        "length_penalty": {"type": "number", "description": "with use_beam_search: a finished beam scores sum(logprobs) / length ** length_penalty (default 1)"},
        "early_stopping": {"oneOf": [{"type": "boolean"}, {"type": "string", "enum": ["never"]}], "description": "with use_beam_search, as transformers: true = stop once n beams finished; false (default) = also when no running beam can beat them at its current length; never = only when none could at max_tokens"},
        "stream": {"type": "boolean"},
        "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}, "continuous_usage_stats": {"type": "boolean", "description": "vLLM's: with include_usage, every chunk carries its choice's usage so far"}}}}},
      "ChatRequest": {"type": "object", "required": ["messages"], "properties": {
        "model": {"type": "string", "maxLength": 256},
        "messages": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["role", "content"],
          "properties": {"role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool"]}, "content": {"type": "string"}, "tool_call_id": {"type": "string"}}}},
        "tools": {"type": "array", "maxItems": 128, "items": {"type": "object", "required": ["type", "function"], "properties": {"type": {"type": "string", "enum": ["function"]}, "function": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"}, "description": {"type": "string"}, "parameters": {"type": "object"}}}}}, "description": "OpenAI's function calling, with tool_choice naming a function or \"required\""},
        "tool_choice": {"oneOf": [{"type": "string", "enum": ["none", "required", "auto"]}, {"type": "object", "required": ["type", "function"], "properties": {"type": {"type": "string", "enum": ["function"]}, "function": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}}], "description": "a named function: its arguments under its parameters schema; required: a list of calls; auto (the default with tools) is refused: BLOOM models have no tool-call format"},
        "max_tokens": {"type": "integer", "minimum": 1, "nullable": true, "description": "absent or null: up to the context limit; deprecated by OpenAI for max_completion_tokens"},
        "max_completion_tokens": {"type": "integer", "minimum": 1, "nullable": true, "description": "OpenAI's current name for max_tokens; wins when both are given (as vLLM)"},
        "n": {"type": "integer", "minimum": 1, "maximum": 128},
        "best_of": {"type": "integer", "minimum": 1, "maximum": 128, "description": "vLLM's: candidates sampled (>= n; best_of <= 128), the n with the highest mean token logprob returned, best first (not with stream)"},
        "truncate_prompt_tokens": {"type": "integer", "minimum": 1, "description": "vLLM's: keep the last N prompt tokens"},
        "temperature": {"type": "number", "minimum": 0, "maximum": 100},
        "top_p": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "maximum": 1}, "seed": {"type": "integer"},
        "skip_special_tokens": {"type": "boolean", "description": "vLLM's: false keeps special tokens in the text (default true)"},
        "use_beam_search": {"type": "boolean", "description": "vLLM's: beam search as transformers' generate(num_beams=n): the n beams are the choices, best first (n <= 10; not with stream, sampling, stop strings, structured outputs or echo)"},
        "length_penalty": {"type": "number", "description": "with use_beam_search: a finished beam scores sum(logprobs) / length ** length_penalty (default 1)"},
        "early_stopping": {"oneOf": [{"type": "boolean"}, {"type": "string", "enum": ["never"]}], "description": "with use_beam_search, as transformers: true = stop once n beams finished; false (default) = also when no running beam can beat them at its current length; never = only when none could at max_tokens"},
        "stop": {"$ref": "#/components/schemas/Stop"}, "stream": {"type": "boolean"},
        "prompt_logprobs": {"type": "integer", "minimum": 0, "maximum": 20, "description": "vLLM's: each prompt token's logprob, rank and N alternatives, on the response (above 0 not with stream)"},
        "logit_bias": {"type": "object", "maxProperties": 300, "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}, "description": "token id (as a string) -> bias added to its logit"},
        "allowed_token_ids": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}, "description": "vLLM's: only these tokens are generated"},
        "bad_words": {"type": "array", "maxItems": 64, "items": {"type": "string", "minLength": 1}, "description": "vLLM's: never generated"},
        "guided_choice": {"type": "array", "minItems": 1, "maxItems": 256, "items": {"type": "string", "minLength": 1}, "description": "vLLM's: the output is one of these (not with ignore_eos or min_tokens)"},
        "guided_json": {"oneOf": [{"type": "object"}, {"type": "string"}], "description": "vLLM's: a JSON Schema (or its text) the output follows, ended by EOS; keywords that constrain values beyond type, properties, required, additionalProperties, items, minItems, maxItems, minLength, maxLength, enum, const, anyOf, oneOf and $ref are refused"},
        "response_format": {"oneOf": [
          {"type": "object", "required": ["type"], "properties": {"type": {"type": "string", "enum": ["text", "json_object"]}}},
          {"type": "object", "required": ["type", "json_schema"], "properties": {"type": {"type": "string", "enum": ["json_schema"]}, "json_schema": {"type": "object", "properties": {"name": {"type": "string"}, "schema": {"type": "object"}, "strict": {"type": "boolean"}}}}}],
          "description": "OpenAI's: json_object = any JSON object; json_schema = the schema's (as guided_json)"},
        "guided_regex": {"type": "string", "minLength": 1, "maxLength": 16384, "description": "vLLM's: the whole output matches this regular expression (no backreferences, lookaround, \\b or flags), ended by EOS"},
        "guided_grammar": {"type": "string", "minLength": 1, "maxLength": 65536, "description": "vLLM's (llama.cpp's GBNF): the whole output is a root of this context-free grammar (rules name ::= ..., literals, character classes, groups, * + ? {m,n}; no left recursion), ended by EOS"},
        "grammar": {"type": "string", "minLength": 1, "maxLength": 65536, "description": "llama.cpp's server's spelling of guided_grammar"},
        "json_schema": {"type": "object", "description": "llama.cpp's server's spelling of guided_json"},
        "structured_outputs": {"type": "object", "properties": {"choice": {"type": "array", "minItems": 1, "maxItems": 256, "items": {"type": "string", "minLength": 1}}, "json": {"type": "object"}, "regex": {"type": "string", "minLength": 1}, "grammar": {"type": "string", "minLength": 1}, "json_object": {"type": "boolean"}, "disable_any_whitespace": {"type": "boolean"}}, "description": "vLLM's newer spelling of guided_choice, guided_json, guided_regex and guided_grammar; one constraint per request"},
        "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}, "continuous_usage_stats": {"type": "boolean", "description": "vLLM's: with include_usage, every chunk carries its choice's usage so far"}}}}},
      "TgiGenerateRequest": {"type": "object", "required": ["inputs"], "properties": {
        "inputs": {"type": "string", "minLength": 1}, "stream": {"type": "boolean"},
        "parameters": {"type": "object", "properties": {
          "max_new_tokens": {"type": "integer", "minimum": 1, "description": "absent: max_total_tokens - input tokens (TGI >= 1.1.1)"},
          "temperature": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "maximum": 100},
          "top_k": {"type": "integer", "minimum": 1},
          "top_p": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "maximum": 1},
          "typical_p": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "maximum": 1},
          "repetition_penalty": {"type": "number", "exclusiveMinimum": true, "minimum": 0}, "do_sample": {"type": "boolean"},
          "seed": {"type": "integer", "minimum": 0}, "stop": {"type": "array", "maxItems": 4, "items": {"type": "string", "minLength": 1}},
          "truncate": {"type": "integer", "minimum": 1, "description": "keep the last N input tokens"},
          "details": {"type": "boolean"}, "return_full_text": {"type": "boolean", "description": "default false; true on POST /"},
          "best_of": {"type": "integer", "minimum": 1, "maximum": 8, "description": "candidates sampled (needs sampling, no seed, no stream); the one with the highest mean token logprob is returned, the others in details.best_of_sequences"},
          "grammar": {"oneOf": [
            {"type": "object", "required": ["type", "value"], "properties": {"type": {"type": "string", "enum": ["json", "json_object", "json_schema"]}, "value": {"type": "object"}}},
            {"type": "object", "required": ["type", "value"], "properties": {"type": {"type": "string", "enum": ["regex"]}, "value": {"type": "string", "minLength": 1}}}],
            "description": "TGI's: json = value is a JSON Schema the output follows; json_schema = value is {name, schema}; regex = the whole output matches value"}}}}},
      "TokenizeRequest": {"oneOf": [
        {"type": "object", "required": ["inputs"], "properties": {"inputs": {"type": "string"}}, "description": "TGI's: answers a list of {id, text, start, stop}"},
        {"type": "object", "required": ["prompt"], "properties": {"model": {"type": "string"}, "prompt": {"type": "string"}, "add_special_tokens": {"type": "boolean"}, "return_token_strs": {"type": "boolean"}}, "description": "vLLM's: answers {count, max_model_len, tokens, token_strs}"},
        {"type": "object", "required": ["messages"], "properties": {"model": {"type": "string"}, "messages": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["role", "content"], "properties": {"role": {"type": "string", "enum": ["system", "developer", "user", "assistant"]}, "content": {"type": "string"}}}}, "add_generation_prompt": {"type": "boolean"}, "return_token_strs": {"type": "boolean"}}, "description": "vLLM's, the chat template applied"}]},
      "DetokenizeRequest": {"type": "object", "required": ["tokens"], "properties": {"model": {"type": "string"}, "tokens": {"type": "array", "items": {"type": "integer", "minimum": 0}}}}
    },
    "responses": {
      "OpenAIError": {"description": "Error (400, 401, 404, 413, 415 a body that is not JSON, 429, 503, 504)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OpenAIError"}}}},
      "TgiError": {"description": "Error (400, 401, 413, 415 a body that is not JSON, 422, 424 a failed generation, 429, 503, 504)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TgiError"}}}},
      "TokenizeError": {"description": "Error in the shape of the body's API: TGI's for an inputs body, OpenAI's (vLLM's) for a prompt or messages body", "content": {"application/json": {"schema": {"oneOf": [{"$ref": "#/components/schemas/TgiError"}, {"$ref": "#/components/schemas/OpenAIError"}]}}}}
    }
  },
  "security": [{"bearer": []}],
  "paths": {
    "/live": {"get": {"summary": "Liveness", "security": [], "responses": {"200": {"description": "The process is up"}}}},
    "/health": {"get": {"summary": "Readiness: the gateway is not draining and the backend is SERVING and answers", "security": [], "responses": {"200": {"description": "Ready"}, "503": {"$ref": "#/components/responses/TgiError"}}}},
    "/metrics": {"get": {"summary": "Prometheus metrics of the gateway (an API key or a --metrics-api-keys-file scrape key)", "responses": {"200": {"description": "Text format 0.0.4", "content": {"text/plain": {}}}, "401": {"$ref": "#/components/responses/TgiError"}}}},
    "/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.0", "content": {"application/json": {}}}, "401": {"$ref": "#/components/responses/TgiError"}}}},
    "/info": {"get": {"summary": "TGI model information and limits", "responses": {"200": {"description": "Model info", "content": {"application/json": {}}}, "default": {"$ref": "#/components/responses/TgiError"}}}},
    "/v1/models": {"get": {"summary": "OpenAI model list", "responses": {"200": {"description": "One model", "content": {"application/json": {}}}, "default": {"$ref": "#/components/responses/OpenAIError"}}}},
    "/v1/models/{model}": {"get": {"summary": "OpenAI model retrieval: the served model by its name (percent-encoded), 404 for another", "parameters": [{"name": "model", "in": "path", "required": true, "schema": {"type": "string"}}], "responses": {"200": {"description": "The model", "content": {"application/json": {}}}, "default": {"$ref": "#/components/responses/OpenAIError"}}}},
    "/v1/completions": {"post": {"summary": "OpenAI completion (SSE when stream is true)",
      "parameters": [{"$ref": "#/components/parameters/RequestId"}],
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CompletionRequest"}}}},
      "responses": {"200": {"description": "Completion", "headers": {"X-Request-Id": {"$ref": "#/components/headers/RequestId"}}, "content": {"application/json": {}, "text/event-stream": {}}}, "default": {"$ref": "#/components/responses/OpenAIError"}}}},
    "/v1/chat/completions": {"post": {"summary": "OpenAI chat completion (SSE when stream is true)",
      "parameters": [{"$ref": "#/components/parameters/RequestId"}],
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ChatRequest"}}}},
      "responses": {"200": {"description": "Chat completion", "headers": {"X-Request-Id": {"$ref": "#/components/headers/RequestId"}}, "content": {"application/json": {}, "text/event-stream": {}}}, "default": {"$ref": "#/components/responses/OpenAIError"}}}},
    "/generate": {"post": {"summary": "TGI generate",
      "parameters": [{"$ref": "#/components/parameters/RequestId"}],
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TgiGenerateRequest"}}}},
      "responses": {"200": {"description": "Generated text", "headers": {"X-Request-Id": {"$ref": "#/components/headers/RequestId"}}, "content": {"application/json": {}}}, "default": {"$ref": "#/components/responses/TgiError"}}}},
    "/generate_stream": {"post": {"summary": "TGI generate as server-sent events",
      "parameters": [{"$ref": "#/components/parameters/RequestId"}],
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TgiGenerateRequest"}}}},
      "responses": {"200": {"description": "Token events", "headers": {"X-Request-Id": {"$ref": "#/components/headers/RequestId"}}, "content": {"text/event-stream": {}}}, "default": {"$ref": "#/components/responses/TgiError"}}}},
    "/": {"post": {"summary": "TGI compatibility route: /generate_stream when stream is true, else /generate answered as a list of one",
      "parameters": [{"$ref": "#/components/parameters/RequestId"}],
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TgiGenerateRequest"}}}},
      "responses": {"200": {"description": "Generated text or token events", "headers": {"X-Request-Id": {"$ref": "#/components/headers/RequestId"}}, "content": {"application/json": {}, "text/event-stream": {}}}, "default": {"$ref": "#/components/responses/TgiError"}}}},
    "/tokenize": {"post": {"summary": "TGI's or vLLM's tokenize, by the body (at most max_input_tokens tokens)",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TokenizeRequest"}}}},
      "responses": {"200": {"description": "TGI: tokens with ids and byte offsets; vLLM: the ids and their count", "content": {"application/json": {}}}, "default": {"$ref": "#/components/responses/TokenizeError"}}}},
    "/detokenize": {"post": {"summary": "vLLM detokenize: the text of token ids (special tokens kept)",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DetokenizeRequest"}}}},
      "responses": {"200": {"description": "{prompt}", "content": {"application/json": {}}}, "default": {"$ref": "#/components/responses/OpenAIError"}}}}
  }
})json");
  return *document;
}

}  // namespace blossom::gateway
