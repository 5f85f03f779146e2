// The engine's observer in the server: every step and finished request go to the metrics; and
// when the engine fails for good (EngineObserver::OnEngineFailed: a tensor-parallel group out of
// step, a GPU in a sticky error state), the service refuses generations (MODEL_FAILED) and
// `not_serving` runs (blossom-server turns gRPC health NOT_SERVING), so that load balancers
// and readiness probes stop sending it requests it could only fail.
//
// Thread-safety: called on the engine thread; `not_serving` must be safe there.
#ifndef BLOSSOM_SERVER_ENGINE_EVENTS_H_
#define BLOSSOM_SERVER_ENGINE_EVENTS_H_

#include <functional>
#include <utility>

#include "engine/serving/engine.h"
#include "server/blossom_service.h"
#include "server/server_metrics.h"

namespace blossom {

class EngineEvents : public EngineObserver {
 public:
  // `metrics` and `service` must outlive the engine; `not_serving` may be empty.
  EngineEvents(ServerMetrics* metrics, BlossomService* service, std::function<void()> not_serving)
      : metrics_(metrics), service_(service), not_serving_(std::move(not_serving)) {}

  void OnStep(const StepStats& step) override { metrics_->OnStep(step); }
  void OnRequestFinished(const EngineEvent& event) override { metrics_->OnRequestFinished(event); }
  void OnFirstToken(const RequestTimings& timings, bool beam_round) override {
    metrics_->OnFirstToken(timings, beam_round);
  }
  void OnEngineFailed(const absl::Status& failure) override;

 private:
  ServerMetrics* const metrics_;
  BlossomService* const service_;
  const std::function<void()> not_serving_;
};

}  // namespace blossom

#endif  // BLOSSOM_SERVER_ENGINE_EVENTS_H_
