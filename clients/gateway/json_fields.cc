#include "clients/gateway/json_fields.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/loader/json_util.h"
#include "engine/text/utf8.h"
#include "server/status_details.h"

namespace blossom::gateway {
absl::Status FieldError(absl::string_view field, absl::string_view message) {
  return WithFieldViolation(absl::InvalidArgumentError(absl::StrCat(field, ": ", message)), field,
                            message);
}

std::string ParamOf(const absl::Status& status) { return DetailsOf(status).field; }

absl::StatusOr<Json> ParseJsonObject(absl::string_view body) {
  size_t bad = FindInvalidUtf8(body);
  if (bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("request body is not valid UTF-8 (byte ", bad, ")"));
  }
  // The one strict JSON entry point (also used for checkpoints): rejects a NUL byte (where
  // nlohmann's lexer would stop, accepting "{}\0garbage") and duplicate keys (ambiguous).
  absl::StatusOr<Json> parsed = ParseJsonStrict(body, "request body");
  if (!parsed.ok()) return parsed.status();
  Json json = std::move(*parsed);
  if (!json.is_object()) return absl::InvalidArgumentError("request body must be a JSON object");
  return json;
}

std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string Dump(const OrderedJson& json) {
  return json.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

absl::Status GetNumber(const Json& obj, const char* field, absl::optional<double>* out) {
  out->reset();
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) return FieldError(field, "must be a number");
  double v = it->get<double>();
  // Literals such as 1e999 parse to infinity.
  if (!std::isfinite(v)) return FieldError(field, "must be a finite number");
  *out = v;
  return absl::OkStatus();
}

absl::Status GetInt(const Json& obj, const char* field, int64_t min, int64_t max,
                    absl::optional<int64_t>* out) {
  out->reset();
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer()) return FieldError(field, "must be an integer");
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return FieldError(field, absl::StrCat("must be at most ", max));
  }
  int64_t v = it->get<int64_t>();
  if (v < min) return FieldError(field, absl::StrCat("must be at least ", min));
  if (v > max) return FieldError(field, absl::StrCat("must be at most ", max));
  *out = v;
  return absl::OkStatus();
}

absl::Status GetUint64(const Json& obj, const char* field, absl::optional<uint64_t>* out) {
  out->reset();
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer()) return FieldError(field, "must be an integer");
  if (!it->is_number_unsigned() && it->get<int64_t>() < 0) {
    return FieldError(field, "must be at least 0");
  }
  *out = it->get<uint64_t>();
  return absl::OkStatus();
}

absl::Status GetBool(const Json& obj, const char* field, absl::optional<bool>* out) {
  out->reset();
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) return FieldError(field, "must be a boolean");
  *out = it->get<bool>();
  return absl::OkStatus();
}

absl::Status GetString(const Json& obj, const char* field, absl::optional<std::string>* out) {
  out->reset();
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) return FieldError(field, "must be a string");
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status GetStringList(const Json& obj, const char* field, size_t max_items,
                           std::vector<std::string>* out) {
  out->clear();
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return absl::OkStatus();
  if (it->is_string()) {
    out->push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (const Json& item : *it) {
      if (!item.is_string()) return FieldError(field, "must be a string or a list of strings");
      out->push_back(item.get<std::string>());
    }
  } else {
    return FieldError(field, "must be a string or a list of strings");
  }
  if (out->size() > max_items) {
    return FieldError(field, absl::StrCat("at most ", max_items, " entries are allowed"));
  }
  for (const std::string& s : *out) {
    if (s.empty()) return FieldError(field, "entries must not be empty");
  }
  return absl::OkStatus();
}

absl::Status GetTokenIds(const Json& obj, const char* field, size_t max_items,
                         std::vector<int32_t>* out) {
  out->clear();
  auto ids = obj.find(field);
  if (ids == obj.end() || ids->is_null()) return absl::OkStatus();
  if (!ids->is_array()) return FieldError(field, "must be a list of integers");
  if (ids->size() > max_items) {
    return FieldError(field, absl::StrCat("at most ", max_items, " token ids are allowed"));
  }
  for (const Json& id : *ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return FieldError(field, "must be a list of non-negative integers");
    }
    out->push_back(id.get<int32_t>());
  }
  return absl::OkStatus();
}

absl::Status CheckRange(const char* field, const absl::optional<double>& value, double min,
                        bool min_exclusive, double max, bool max_exclusive) {
  if (!value) return absl::OkStatus();
  double v = *value;
  bool ok = (min_exclusive ? v > min : v >= min) && (max_exclusive ? v < max : v <= max);
  if (ok) return absl::OkStatus();
  return FieldError(field, absl::StrCat("must be in ", min_exclusive ? "(" : "[", min, ", ", max,
                                        max_exclusive ? ")" : "]", ", got ", v));
}

}  // namespace blossom::gateway
