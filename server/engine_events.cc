#include "server/engine_events.h"

#include "spdlog/spdlog.h"

namespace blossom {

void EngineEvents::OnEngineFailed(const absl::Status& failure) {
  spdlog::error(
      "the model can no longer run ({}): every request was ended, health is NOT_SERVING; "
      "restart this server",
      failure.ToString());
  service_->MarkFailed();
  if (not_serving_) not_serving_();
}

}  // namespace blossom
