#include "clients/gateway/stream_call.h"

#include <utility>

#include "proto/blossom/v1/stream_request.h"

namespace blossom::gateway {

void StreamCall::Start(blossom::v1::Blossom::Stub* stub, const blossom::v1::GenerateRequest& request) {
  request_ = blossom::v1::ToStreamRequest(request);
  self_ = shared_from_this();
  stub->async()->GenerateStream(&context_, &request_, this);
  AddHold();
  StartRead(&message_);
  StartCall();
}

void StreamCall::OnReadDone(bool ok) {
  if (!ok) {
    RemoveHold();  // the stream ended: no more reads; OnDone follows
    return;
  }
  if (!on_message_(message_)) {
    context_.TryCancel();
    StartRead(&message_);  // fails at once, which ends the call
    return;
  }
  when_writable_([this] { StartRead(&message_); });
}

void StreamCall::OnDone(const grpc::Status& status) {
  std::shared_ptr<StreamCall> keep = std::move(self_);  // freed when this returns
  DoneFn done = std::move(on_done_);
  on_message_ = nullptr;
  done(status);
}

}  // namespace blossom::gateway
