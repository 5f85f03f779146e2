// Test helper: the real gRPC service (BlossomService + Engine + ModelRunner, CPU backend, one
// thread) on 127.0.0.1 with an ephemeral port, as server/blossom_service_test.cc builds it.
// Until Load() the service answers UNAVAILABLE ("loading"). Not thread-safe (construct, Load
// and destroy on one thread; the service itself serves any number of client threads).
#ifndef BLOSSOM_BENCHMARKS_IN_PROCESS_SERVER_H_
#define BLOSSOM_BENCHMARKS_IN_PROCESS_SERVER_H_

#include <chrono>
#include <memory>
#include <string>

#include "engine/model/model_runner.h"
#include "gtest/gtest.h"
#include "server/blossom_service.h"
#include "tests/util/fixture_path.h"

namespace blossom::testing {

class InProcessServer {
 public:
  explicit InProcessServer(ServiceOptions options = {}) : service_(std::move(options), nullptr) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~InProcessServer() {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (engine_) engine_->Shutdown();
  }
  // `model` is a directory under tests/fixtures/models.
  void Load(const std::string& model = "bloom-tiny-h4") {
    ModelRunnerOptions options;
    options.model_dir = FixturePath("models/" + model);
    options.threads_per_rank = 1;
    auto runner = ModelRunner::Create(options);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = std::move(*runner);
    auto tokenizer = Tokenizer::FromFile(options.model_dir + "/tokenizer.json");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
    auto engine = Engine::Create(runner_.get(), tokenizer_.get(), EngineConfig{}, nullptr);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    v1::ModelInfo info;
    info.set_model_id(model);
    service_.SetEngine(engine_.get(), tokenizer_.get(), info);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  Engine& engine() { return *engine_; }

 private:
  BlossomService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace blossom::testing

#endif  // BLOSSOM_BENCHMARKS_IN_PROCESS_SERVER_H_
