#include "clients/gateway/health_watch.h"

#include <utility>

namespace blossom::gateway {

HealthWatch::HealthWatch(std::shared_ptr<grpc::ChannelInterface> channel, Options options)
    : stub_(grpc::health::v1::Health::NewStub(std::move(channel))),
      options_(std::move(options)),
      thread_([this] { Run(); }) {}

HealthWatch::~HealthWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  changed_.notify_all();
  thread_.join();
}

HealthWatch::Status HealthWatch::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

HealthWatch::Status HealthWatch::WaitForChange(Status from, absl::Duration bound) const {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, absl::ToChronoMilliseconds(bound), [&] { return status_ != from; });
  return status_;
}

void HealthWatch::Set(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = status;
  }
  changed_.notify_all();
}

void HealthWatch::Run() {
  using Serving = grpc::health::v1::HealthCheckResponse;
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(options_.service);
  for (;;) {
    grpc::ClientContext context;
    context.set_wait_for_ready(true);  // a down backend: wait for the channel to reconnect
    if (!options_.authorization.empty()) context.AddMetadata("authorization", options_.authorization);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      context_ = &context;
    }
    std::unique_ptr<grpc::ClientReader<Serving>> reader = stub_->Watch(&context, request);
    Serving response;
    bool any_message = false;
    while (reader->Read(&response)) {
      any_message = true;
      Set(response.status() == Serving::SERVING ? Status::kServing : Status::kNotServing);
    }
    const grpc::Status ended = reader->Finish();
    std::unique_lock<std::mutex> lock(mu_);
    context_ = nullptr;
    status_ = ended.error_code() == grpc::StatusCode::UNIMPLEMENTED ? Status::kUnimplemented
                                                                   : Status::kUnknown;
    changed_.notify_all();
    // A stream that carried messages broke (the server went away): watch again at once, which
    // waits for the channel. One that ended straight away would end so again: pause first.
    if (!any_message) {
      changed_.wait_for(lock, absl::ToChronoMilliseconds(options_.retry_delay),
                        [this] { return stopping_; });
    }
  }
}

}  // namespace blossom::gateway
