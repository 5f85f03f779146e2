#include "benchmarks/load_runner.h"

#include <atomic>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

namespace blossom {
namespace {

// Answers each request on its own thread after the previous one completed, emitting
// max_new_tokens tokens; records the most requests it ever had in flight.
class FakeClient : public LoadClient {
 public:
  ~FakeClient() override {
    for (std::thread& t : threads_) t.join();
  }
  void Start(const LoadRequest& request, BenchClock::time_point epoch, Done done) override {
    const int now = ++in_flight_;
    int seen = max_seen_.load();
    while (now > seen && !max_seen_.compare_exchange_weak(seen, now)) {
    }
    RequestRecord r;
    r.index = request.index;
    r.scheduled_s = request.scheduled_s;
    r.send_s = SecondsSince(epoch);
    r.expected_output_tokens = request.max_new_tokens;
    std::lock_guard<std::mutex> lock(mu_);
    threads_.emplace_back([this, r, request, epoch, done]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      for (int i = 0; i < request.max_new_tokens; ++i) {
        r.token_times_s.push_back(SecondsSince(epoch));
      }
      r.first_token_s = r.token_times_s.front();
      r.output_tokens = request.max_new_tokens;
      r.prompt_tokens = request.prompt_tokens;
      r.end_s = SecondsSince(epoch);
      r.success = request.index % 5 != 4;
      if (!r.success) r.error = "fake: every fifth fails";
      --in_flight_;
      done(std::move(r));
    });
  }
  absl::StatusOr<Tokenized> Tokenize(const std::string&) override { return Tokenized{}; }
  bool SupportsTokenIds() const override { return true; }
  int max_seen() const { return max_seen_.load(); }

 private:
  std::atomic<int> in_flight_{0};
  std::atomic<int> max_seen_{0};
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

TEST(LoadRunnerTest, RecordsEveryRequestInOrderUnderTheCap) {
  FakeClient client;
  std::vector<LoadRequest> requests(20);
  for (int i = 0; i < 20; ++i) {
    requests[i].max_new_tokens = 1 + i % 3;
    requests[i].prompt_tokens = 4;
  }
  const std::vector<double> schedule(20, 0.0);  // all at once: the cap is what limits
  LoadRunResult result = RunLoad(client, requests, schedule, 3);
  ASSERT_EQ(result.records.size(), 20u);
  EXPECT_LE(client.max_seen(), 3);
  for (int i = 0; i < 20; ++i) {
    const RequestRecord& r = result.records[i];
    EXPECT_EQ(r.index, i);
    EXPECT_EQ(r.output_tokens, 1 + i % 3);
    EXPECT_EQ(r.success, i % 5 != 4);
    EXPECT_GE(r.send_s, r.scheduled_s);
    EXPECT_LE(r.end_s, result.duration_s);
  }
  const ServingSummary s = SummarizeRequests(result.records, result.duration_s, Slo{});
  EXPECT_EQ(s.completed, 16);
  EXPECT_EQ(s.failures.at("fake"), 4);
}

TEST(LoadRunnerTest, SendsNoEarlierThanScheduled) {
  FakeClient client;
  std::vector<LoadRequest> requests(4);
  const std::vector<double> schedule = {0.0, 0.01, 0.02, 0.03};
  LoadRunResult result = RunLoad(client, requests, schedule, 0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_GE(result.records[i].send_s, schedule[i]);
    EXPECT_EQ(result.records[i].scheduled_s, schedule[i]);
  }
}

}  // namespace
}  // namespace blossom
