// GenerateRequest <-> GenerateStreamRequest. The two messages are declared field for field alike
// (blossom.proto), so the conversion is a re-parse of the same bytes: lossless, and it keeps
// working for any field added to both. stream_request_test checks that they stay alike.
#ifndef BLOSSOM_PROTO_BLOSSOM_V1_STREAM_REQUEST_H_
#define BLOSSOM_PROTO_BLOSSOM_V1_STREAM_REQUEST_H_

#include "proto/blossom/v1/blossom.pb.h"

namespace blossom::v1 {

inline GenerateStreamRequest ToStreamRequest(const GenerateRequest& request) {
  GenerateStreamRequest out;
  out.ParseFromString(request.SerializeAsString());
  return out;
}

inline GenerateRequest FromStreamRequest(const GenerateStreamRequest& request) {
  GenerateRequest out;
  out.ParseFromString(request.SerializeAsString());
  return out;
}

}  // namespace blossom::v1

#endif  // BLOSSOM_PROTO_BLOSSOM_V1_STREAM_REQUEST_H_
