#include "server/status_details.h"

#include <string>

#include "absl/strings/cord.h"
#include "proto/google/rpc/error_details.pb.h"

namespace blossom {
namespace {

std::string Bounded(absl::string_view text) {
  if (text.size() <= kMaxDetailBytes) return std::string(text);
  // Cut at a UTF-8 character boundary: protobuf string fields must stay valid UTF-8.
  size_t cut = kMaxDetailBytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "...";
}

template <typename Message>
bool ParsePayload(const absl::Status& status, const char* type_url, Message* out) {
  absl::optional<absl::Cord> payload = status.GetPayload(type_url);
  return payload.has_value() && out->ParseFromString(std::string(*payload));
}

}  // namespace

absl::Status WithFieldViolation(absl::Status status, absl::string_view field,
                                absl::string_view description) {
  if (status.ok()) return status;
  google::rpc::BadRequest bad_request;
  ParsePayload(status, kBadRequestTypeUrl, &bad_request);
  google::rpc::BadRequest::FieldViolation* violation = bad_request.add_field_violations();
  violation->set_field(Bounded(field));
  violation->set_description(Bounded(description));
  status.SetPayload(kBadRequestTypeUrl, absl::Cord(bad_request.SerializeAsString()));
  return status;
}

absl::Status WithReason(absl::Status status, absl::string_view reason) {
  if (status.ok()) return status;
  google::rpc::ErrorInfo info;
  info.set_reason(std::string(reason));
  info.set_domain(kErrorDomain);
  status.SetPayload(kErrorInfoTypeUrl, absl::Cord(info.SerializeAsString()));
  return status;
}

absl::Status WithRetryDelay(absl::Status status, absl::Duration delay) {
  if (status.ok()) return status;
  google::rpc::RetryInfo retry;
  const int64_t seconds = absl::IDivDuration(delay, absl::Seconds(1), &delay);
  retry.mutable_retry_delay()->set_seconds(seconds);
  retry.mutable_retry_delay()->set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(delay)));
  status.SetPayload(kRetryInfoTypeUrl, absl::Cord(retry.SerializeAsString()));
  return status;
}

StatusDetails DetailsOf(const absl::Status& status) {
  StatusDetails details;
  google::rpc::BadRequest bad_request;
  if (ParsePayload(status, kBadRequestTypeUrl, &bad_request) &&
      bad_request.field_violations_size() > 0) {
    details.field = bad_request.field_violations(0).field();
    details.field_description = bad_request.field_violations(0).description();
  }
  google::rpc::ErrorInfo info;
  if (ParsePayload(status, kErrorInfoTypeUrl, &info)) {
    details.reason = info.reason();
    details.domain = info.domain();
  }
  google::rpc::RetryInfo retry;
  if (ParsePayload(status, kRetryInfoTypeUrl, &retry) && retry.has_retry_delay()) {
    details.retry_delay = absl::Seconds(retry.retry_delay().seconds()) +
                          absl::Nanoseconds(retry.retry_delay().nanos());
  }
  return details;
}

}  // namespace blossom
