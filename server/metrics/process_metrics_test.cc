#include "server/metrics/process_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace blossom::metrics {
namespace {

TEST(ProcessMetricsTest, SampleIsPlausible) {
  const ProcessSample before = SampleProcess();
  EXPECT_GT(before.resident_bytes, 1 << 20);
  EXPECT_GE(before.virtual_bytes, before.resident_bytes);
  EXPECT_GE(before.open_fds, 3);  // stdin, stdout, stderr at least
  EXPECT_GE(before.max_fds, before.open_fds);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_GT(before.start_time_seconds, now - 3600);
  EXPECT_LE(before.start_time_seconds, now + 1);
  // Opening files is seen; burning CPU is seen.
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) fds.push_back(open("/dev/null", O_RDONLY));
  volatile double sink = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (std::chrono::steady_clock::now() < until) sink = sink + 1.0;
  const ProcessSample after = SampleProcess();
  EXPECT_EQ(after.open_fds, before.open_fds + 5);
  EXPECT_GT(after.cpu_seconds, before.cpu_seconds);
  for (int fd : fds) close(fd);
}

TEST(ProcessMetricsTest, RegisteredAndRefreshedOnRender) {
  Registry registry;
  RegisterProcessMetrics(&registry);
  RegisterBuildInfo(&registry, "blossom_build_info", "Build information.", {{"version", "1.2.3"}});
  const std::string text = registry.Render();
  for (const char* line : {"# TYPE process_cpu_seconds_total counter",
                           "# TYPE process_resident_memory_bytes gauge", "process_open_fds ",
                           "process_max_fds ", "process_start_time_seconds ",
                           "blossom_build_info{version=\"1.2.3\"} 1"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  EXPECT_TRUE(registry.errors().empty());
}

}  // namespace
}  // namespace blossom::metrics
