#include "server/grpc_status.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/google/rpc/status.pb.h"

namespace blossom {
namespace {

constexpr absl::string_view kGoogleTypeUrlPrefix = "type.googleapis.com/";

std::string CutMessage(absl::string_view message) {
  if (message.size() <= kMaxStatusMessageBytes) return std::string(message);
  // Whatever a message quotes, it stays far below gRPC's metadata limit; cut at a UTF-8
  // character boundary.
  size_t cut = kMaxStatusMessageBytes;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(message.substr(0, cut), "...");
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const std::string message = CutMessage(status.message());
  google::rpc::Status rpc_status;
  status.ForEachPayload([&rpc_status](absl::string_view type_url, const absl::Cord& value) {
    if (!absl::StartsWith(type_url, kGoogleTypeUrlPrefix)) return;  // internal payloads stay
    google::protobuf::Any* any = rpc_status.add_details();
    any->set_type_url(std::string(type_url));
    any->set_value(std::string(value));
  });
  const auto code = static_cast<grpc::StatusCode>(status.code());
  if (rpc_status.details_size() == 0) return grpc::Status(code, message);
  rpc_status.set_code(static_cast<int32_t>(status.code()));
  rpc_status.set_message(message);
  return grpc::Status(code, message, rpc_status.SerializeAsString());
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  if (out.ok() || status.error_details().empty()) return out;
  google::rpc::Status rpc_status;
  if (!rpc_status.ParseFromString(status.error_details())) return out;
  for (const google::protobuf::Any& detail : rpc_status.details()) {
    if (!absl::StartsWith(detail.type_url(), kGoogleTypeUrlPrefix)) continue;
    out.SetPayload(detail.type_url(), absl::Cord(detail.value()));
  }
  return out;
}

}  // namespace blossom
