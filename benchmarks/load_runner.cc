#include "benchmarks/load_runner.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace blossom {

LoadRunResult RunLoad(LoadClient& client, std::vector<LoadRequest> requests,
                      const std::vector<double>& schedule, int max_concurrency) {
  LoadRunResult result;
  const size_t n = std::min(requests.size(), schedule.size());
  result.records.resize(n);
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  size_t finished = 0;
  double last_end = 0;
  const BenchClock::time_point epoch = BenchClock::now();
  for (size_t i = 0; i < n; ++i) {
    std::this_thread::sleep_until(epoch + std::chrono::duration_cast<BenchClock::duration>(
                                              std::chrono::duration<double>(schedule[i])));
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return max_concurrency <= 0 || in_flight < max_concurrency; });
      ++in_flight;
    }
    requests[i].index = static_cast<int>(i);
    requests[i].scheduled_s = schedule[i];
    client.Start(requests[i], epoch, [&, i](RequestRecord record) {
      const double now = SecondsSince(epoch);
      std::lock_guard<std::mutex> lock(mu);
      result.records[i] = std::move(record);
      last_end = std::max(last_end, now);
      --in_flight;
      ++finished;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return finished == n; });
  result.duration_s = last_end;
  return result;
}

}  // namespace blossom
