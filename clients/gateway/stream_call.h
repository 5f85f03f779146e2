// The gateway's GenerateStream call: a gRPC client read reactor whose reads follow the HTTP
// client's pace (ResponseWriter::OnWritable), so a slow client never blocks a thread.
#ifndef BLOSSOM_CLIENTS_GATEWAY_STREAM_CALL_H_
#define BLOSSOM_CLIENTS_GATEWAY_STREAM_CALL_H_

#include <functional>
#include <memory>
#include <utility>

#include "grpcpp/grpcpp.h"
#include "proto/blossom/v1/blossom.grpc.pb.h"

namespace blossom::gateway {

// A server-streaming GenerateStream call. Owns itself from Start() until OnDone (gRPC's
// callback-reactor contract); Cancel() is safe from any thread while a reference is held.
// on_message returning false cancels the call (the HTTP peer is gone).
//
// Flow control: after each message the next read starts only when `when_writable` runs its
// argument (ResponseWriter::OnWritable: at once, or later on the HTTP I/O thread). So a client
// that does not read leaves the call waiting with no read in flight: gRPC's HTTP/2 window fills
// and the server's stream waits, and no gRPC callback thread is ever blocked on the client.
// Reads may thus start outside a reaction, which takes a hold (added before StartCall, removed
// when a read fails, gRPC's rule for holds); OnDone cannot run while a read is pending.
class StreamCall : public grpc::ClientReadReactor<blossom::v1::GenerateStreamResponse>,
                   public std::enable_shared_from_this<StreamCall> {
 public:
  using MessageFn = std::function<bool(const blossom::v1::GenerateStreamResponse&)>;
  using WhenWritableFn = std::function<void(std::function<void()> resume)>;
  using DoneFn = std::function<void(const grpc::Status&)>;

  StreamCall(MessageFn on_message, WhenWritableFn when_writable, DoneFn on_done)
      : on_message_(std::move(on_message)),
        when_writable_(std::move(when_writable)),
        on_done_(std::move(on_done)) {}

  grpc::ClientContext* context() { return &context_; }

  // Starts the call; `this` keeps itself alive until OnDone.
  void Start(blossom::v1::Blossom::Stub* stub, const blossom::v1::GenerateRequest& request);

  void Cancel() { context_.TryCancel(); }

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  grpc::ClientContext context_;
  blossom::v1::GenerateStreamRequest request_;
  blossom::v1::GenerateStreamResponse message_;
  MessageFn on_message_;
  const WhenWritableFn when_writable_;
  DoneFn on_done_;
  std::shared_ptr<StreamCall> self_;
};

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_STREAM_CALL_H_
