// Test helper: the real blossom.v1 service (BlossomService + Engine + ModelRunner on the CPU
// backend, one thread) on 127.0.0.1 with an ephemeral port, for tests of the service itself
// and of its clients (load generators, gateways).
//
// Until Load() the service answers UNAVAILABLE ("loading"). The served model name is the
// fixture's directory name, so requests naming another model get NOT_FOUND.
// Thread-safety: construct, Load and destroy on one thread; the service serves any number of
// client threads meanwhile.
#ifndef BLOSSOM_SERVER_TESTING_IN_PROCESS_SERVER_H_
#define BLOSSOM_SERVER_TESTING_IN_PROCESS_SERVER_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "engine/model/model_runner.h"
#include "gtest/gtest.h"
#include "server/blossom_service.h"
#include "server/engine_events.h"
#include "server/metrics/metrics.h"
#include "server/server_metrics.h"
#include "server/undecodable_request.h"
#include "tests/util/fixture_path.h"

namespace blossom::testing {

class InProcessServer {
 public:
  // `model` is a directory under tests/fixtures/models.
  explicit InProcessServer(ServiceOptions options = {}, EngineConfig engine_config = {},
                           std::string model = "bloom-tiny-h4")
      : model_(std::move(model)),
        engine_config_(engine_config),
        metrics_(&registry_, model_),
        service_(WithModelName(std::move(options), model_), &metrics_),
        engine_events_(&metrics_, &service_, [this] { not_serving_calls_.fetch_add(1); }) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    // As blossom-server: a request that does not decode is INVALID_ARGUMENT, not UNIMPLEMENTED.
    builder.experimental().SetInterceptorCreators(UndecodableRequestInterceptors(
        [this](const ClientMetadata& metadata) { return service_.Authenticate(metadata); },
        &metrics_));
    server_ = builder.BuildAndStart();
  }
  ~InProcessServer() {
    // The engine first: its final events finish every open call, so Shutdown need not wait.
    if (engine_) engine_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }

  // For failure tests: a runner put in front of the model's (which outlives it), e.g. one whose
  // steps fail.
  using RunnerWrapper = std::function<std::unique_ptr<ModelRunner>(ModelRunner* model_runner)>;

  void Load(const RunnerWrapper& wrap = nullptr) {
    ModelRunnerOptions options;
    options.model_dir = FixturePath("models/" + model_);
    options.threads_per_rank = 1;
    auto runner = ModelRunner::Create(options);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = std::move(*runner);
    if (wrap) wrapper_ = wrap(runner_.get());
    auto tokenizer = Tokenizer::FromFile(options.model_dir + "/tokenizer.json");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
    auto engine = Engine::Create(wrapper_ ? wrapper_.get() : runner_.get(), tokenizer_.get(),
                                 engine_config_, &engine_events_);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    v1::ModelInfo info;
    info.set_model_id(model_);
    info.set_vocab_size(static_cast<int32_t>(runner_->vocab_size()));
    // As blossom-server's DescribeModel: the engine's cap is the one requests are checked against.
    info.mutable_limits()->set_max_total_tokens(engine_->scheduler_config().max_total_tokens);
    service_.SetEngine(engine_.get(), tokenizer_.get(), info);
  }

  // Waits until the engine holds no request and no KV block (cancellation is asynchronous to
  // the client that asked for it).
  bool WaitForIdle() {
    for (int i = 0; i < 500; ++i) {
      if (engine_->num_unfinished() == 0 && engine_->scheduler_stats().blocks_used == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  BlossomService& service() { return service_; }
  Engine& engine() { return *engine_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  metrics::Registry& registry() { return registry_; }
  // How often the engine's failure for good asked for health NOT_SERVING (EngineEvents).
  int not_serving_calls() const { return not_serving_calls_.load(); }

 private:
  static ServiceOptions WithModelName(ServiceOptions options, const std::string& model) {
    if (options.limits.served_model_name.empty()) options.limits.served_model_name = model;
    return options;
  }

  const std::string model_;
  const EngineConfig engine_config_;
  metrics::Registry registry_;
  ServerMetrics metrics_;
  BlossomService service_;
  std::atomic<int> not_serving_calls_{0};
  EngineEvents engine_events_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<ModelRunner> wrapper_;  // in front of runner_ (Load's `wrap`), or null
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace blossom::testing

#endif  // BLOSSOM_SERVER_TESTING_IN_PROCESS_SERVER_H_
