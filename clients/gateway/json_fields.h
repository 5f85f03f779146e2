// Strict, typed access to fields of a parsed JSON request body, with errors that name the field.
#ifndef BLOSSOM_CLIENTS_GATEWAY_JSON_FIELDS_H_
#define BLOSSOM_CLIENTS_GATEWAY_JSON_FIELDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "nlohmann/json.hpp"

namespace blossom::gateway {

using Json = nlohmann::json;
// For what the gateway writes where key order is part of the API (OpenAI's top_logprobs maps,
// most likely first): keys stay in insertion order, where Json sorts them. Not for parsing
// requests: its objects find keys by linear search.
using OrderedJson = nlohmann::ordered_json;

// Stop sequences: TGI's default limit (reported by /info) on the TGI routes; on the OpenAI
// routes the server's own (ModelLimits.max_stop_strings), as vLLM sets none of its own and
// clients send more than OpenAI's 4 (lm-evaluation-harness: 8 for HumanEval).
inline constexpr size_t kMaxStopSequences = 4;
inline constexpr size_t kMaxOpenAIStopSequences = 16;
// A longer model name can never match; refused here so it is never echoed (issue 14).
inline constexpr size_t kMaxModelNameBytes = 256;

// InvalidArgument "<field>: <message>" carrying a google.rpc.BadRequest field violation
// (//server:status_details), as the server's own refusals do, so the HTTP edge fills OpenAI's
// "param" the same way for both.
absl::Status FieldError(absl::string_view field, absl::string_view message);
// The field of a status's first field violation (a FieldError's, or the server's), or "".
std::string ParamOf(const absl::Status& status);

// Parses a request body: valid UTF-8, valid JSON (no NaN/Infinity literals), an object.
absl::StatusOr<Json> ParseJsonObject(absl::string_view body);

// Serialises JSON; invalid UTF-8 (never expected) is replaced instead of throwing.
std::string Dump(const Json& json);
std::string Dump(const OrderedJson& json);

// Field readers: a missing field or JSON null leaves *out empty and returns OK; a value of the
// wrong type, a non-finite number or one outside the range is a FieldError. Thread-compatible.
absl::Status GetNumber(const Json& obj, const char* field, absl::optional<double>* out);
absl::Status GetInt(const Json& obj, const char* field, int64_t min, int64_t max,
                    absl::optional<int64_t>* out);
// Any integer in [0, 2^64 - 1] (seeds: TGI's is a u64).
absl::Status GetUint64(const Json& obj, const char* field, absl::optional<uint64_t>* out);
absl::Status GetBool(const Json& obj, const char* field, absl::optional<bool>* out);
absl::Status GetString(const Json& obj, const char* field, absl::optional<std::string>* out);
// A string or an array of strings (at most max_items, none empty).
absl::Status GetStringList(const Json& obj, const char* field, size_t max_items,
                           std::vector<std::string>* out);
// An array of token ids (at most max_items integers in [0, 2^31 - 1]); a missing field or null
// leaves *out empty. kMaxTokenIdList bounds a list by the largest vocabulary served (BLOOM's is
// 250,880); the server checks each id against its own.
inline constexpr size_t kMaxTokenIdList = 1 << 18;
absl::Status GetTokenIds(const Json& obj, const char* field, size_t max_items,
                         std::vector<int32_t>* out);
// Checks an optional number against [min, max] (or (min, ...) with min_exclusive).
absl::Status CheckRange(const char* field, const absl::optional<double>& value, double min,
                        bool min_exclusive, double max, bool max_exclusive);

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_JSON_FIELDS_H_
