// Failed steps: one that the runner survives ends only the requests in it; one that leaves the
// runner unusable (ModelRunner::Health) ends every request and closes the engine to new ones.
// And the requests a shutdown cuts: aborted, not failed.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/pretend_device_runner.h"
#include "engine/serving/engine.h"
#include "engine/serving/engine_test_util.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

class EngineFailureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = engine_testing::TinyModel::Load().release();
    ASSERT_NE(model_, nullptr);
    runner_ = model_->runner();
    tokenizer_ = model_->tokenizer();
  }
  static void TearDownTestSuite() { delete model_; }

  static EngineRequest Request(int32_t first_token, int32_t max_new_tokens) {
    return engine_testing::GreedyRequest({first_token, 11, 12, 13}, max_new_tokens);
  }

  static EngineEvent Last(RequestStream& stream) {
    EngineEvent e, last;
    while (stream.Next(&e)) last = e;
    return last;
  }

  static engine_testing::TinyModel* model_;
  static ModelRunner* runner_;
  static Tokenizer* tokenizer_;
};
engine_testing::TinyModel* EngineFailureTest::model_ = nullptr;
ModelRunner* EngineFailureTest::runner_ = nullptr;
Tokenizer* EngineFailureTest::tokenizer_ = nullptr;

class FailureObserver : public EngineObserver {
 public:
  void OnEngineFailed(const absl::Status& failure) override {
    ++calls;
    last = failure;
  }
  std::atomic<int> calls{0};
  absl::Status last;
};

EngineConfig SmallConfig(int32_t max_num_seqs) {
  EngineConfig config;
  config.scheduler.block_size = 4;
  config.scheduler.num_blocks = 64;
  config.scheduler.max_total_tokens = 64;
  config.scheduler.max_num_seqs = max_num_seqs;
  return config;
}

// One sequence runs at a time, so a second request is still waiting when the first one's step
// fails: a fatal failure must end it too, and refuse what comes after.
TEST_F(EngineFailureTest, AFailureForGoodEndsEveryRequestAndRefusesNewOnes) {
  FailingStepRunner failing(runner_, /*fail_from=*/3, /*fatal=*/true, /*closed=*/true);
  FailureObserver observer;
  auto engine = Engine::Create(&failing, tokenizer_, SmallConfig(1), &observer);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto running = (*engine)->Submit(Request(5, 20));
  auto waiting = (*engine)->Submit(Request(6, 20));
  // Both are in before the first step runs (else a loaded machine could fail the engine first
  // and refuse the second).
  failing.Open();
  ASSERT_TRUE(running.ok() && waiting.ok()) << running.status() << " / " << waiting.status();
  const EngineEvent first = Last(**running);
  EXPECT_EQ(first.finish_reason, FinishReason::kError);
  EXPECT_NE(std::string(first.status.message()).find("a peer died"), std::string::npos)
      << first.status;
  const EngineEvent second = Last(**waiting);
  EXPECT_EQ(second.finish_reason, FinishReason::kError);
  EXPECT_EQ(second.status.code(), absl::StatusCode::kUnavailable) << second.status;
  EXPECT_NE(std::string(second.status.message()).find("must be restarted"), std::string::npos)
      << second.status;
  auto refused = (*engine)->Submit(Request(7, 4));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_NE(std::string(refused.status().message()).find("a peer died"), std::string::npos);
  EXPECT_EQ(observer.calls.load(), 1);
  EXPECT_EQ(observer.last.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*engine)->scheduler_stats().blocks_used, 0);
  EXPECT_EQ((*engine)->num_unfinished(), 0);
}

// A device whose sampler fails in a way that leaves it unusable (a sticky error surfacing after
// the forward pass): the engine asks Health() after any failed request, not only a failed
// forward, so it stops admitting at once.
class SamplerLostRunner : public PretendDeviceRunner {
 public:
  explicit SamplerLostRunner(ModelRunner* inner) : PretendDeviceRunner(inner) {}
  absl::StatusOr<std::unique_ptr<BatchSampler>> MakeBatchSampler() override {
    class Lost : public BatchSampler {
     public:
      explicit Lost(bool* lost) : lost_(lost) {}
      std::string name() const override { return "lost"; }
      absl::Status SampleBatch(const Tensor&, absl::Span<const SampleRow>,
                               std::vector<absl::StatusOr<SampleResult>>*) override {
        *lost_ = true;
        return absl::InternalError("illegal memory access in the sampler");
      }
      absl::Status ScoreRows(const Tensor&, absl::Span<const ScoreRow>,
                             std::vector<absl::StatusOr<SampleResult>>*) override {
        *lost_ = true;
        return absl::InternalError("illegal memory access in the sampler");
      }

     private:
      bool* lost_;
    };
    return std::make_unique<Lost>(&lost_);
  }
  absl::Status Health() override {
    return lost_ ? absl::InternalError("CUDA device unusable: illegal address") : absl::OkStatus();
  }

 private:
  bool lost_ = false;  // engine thread only
};

TEST_F(EngineFailureTest, AFailureForGoodAfterTheForwardPassIsSeenToo) {
  SamplerLostRunner lost(runner_);
  FailureObserver observer;
  auto engine = Engine::Create(&lost, tokenizer_, SmallConfig(4), &observer);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto first = (*engine)->Submit(Request(5, 4));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(Last(**first).finish_reason, FinishReason::kError);
  EXPECT_EQ(observer.calls.load(), 1);
  EXPECT_FALSE((*engine)->failure().ok());
  auto refused = (*engine)->Submit(Request(6, 4));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
}

// A failure the runner survives ends the requests of that step only: the next request runs.
TEST_F(EngineFailureTest, AStepFailureTheRunnerSurvivesKeepsTheEngineOpen) {
  FailingStepRunner failing(runner_, /*fail_from=*/3, /*fatal=*/false);
  FailureObserver observer;
  auto engine = Engine::Create(&failing, tokenizer_, SmallConfig(1), &observer);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto running = (*engine)->Submit(Request(5, 20));
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(Last(**running).finish_reason, FinishReason::kError);
  // (Every later step of this runner fails too; what matters is that it is admitted and ended
  // by its own step, not refused.)
  auto next = (*engine)->Submit(Request(6, 4));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(Last(**next).finish_reason, FinishReason::kError);
  EXPECT_EQ(observer.calls.load(), 0);
  EXPECT_TRUE((*engine)->failure().ok());
}

// A drain that runs out cuts healthy requests: they end kAborted (not kError, which metrics and
// alerts count as the model failing) with UNAVAILABLE marked as the shutdown, so that the server
// invites a retry elsewhere. Running and waiting ones alike; a late Submit is refused the same.
TEST_F(EngineFailureTest, ShutdownAbortsOpenRequestsWithoutFailingThem) {
  HoldingRunner holding(runner_, /*free_steps=*/3);
  auto engine = Engine::Create(&holding, tokenizer_, SmallConfig(1));
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto running = (*engine)->Submit(Request(5, 40));
  auto waiting = (*engine)->Submit(Request(6, 40));
  ASSERT_TRUE(running.ok() && waiting.ok()) << running.status() << " / " << waiting.status();
  EngineEvent first;
  ASSERT_TRUE((*running)->Next(&first));
  ASSERT_TRUE(first.has_token && !first.finished);
  std::thread shutdown([&] { (*engine)->Shutdown(); });
  // Shutdown ends the requests (freeing their blocks) before it waits for the step held here.
  while ((*engine)->scheduler_stats().blocks_used > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  holding.Release();
  shutdown.join();
  for (auto* stream : {&*running, &*waiting}) {
    const EngineEvent last = Last(**stream);
    EXPECT_TRUE(last.finished);
    EXPECT_EQ(last.finish_reason, FinishReason::kAborted) << FinishReasonName(last.finish_reason);
    EXPECT_EQ(last.status.code(), absl::StatusCode::kUnavailable) << last.status;
    EXPECT_TRUE(IsEngineShutdown(last.status)) << last.status;
  }
  auto refused = (*engine)->Submit(Request(7, 4));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsEngineShutdown(refused.status())) << refused.status();
  EXPECT_TRUE((*engine)->failure().ok()) << "a shutdown is no failure of the model";
  EXPECT_EQ((*engine)->num_unfinished(), 0);
}

}  // namespace
}  // namespace blossom
