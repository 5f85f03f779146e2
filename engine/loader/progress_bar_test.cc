#include "engine/loader/progress_bar.h"

#include <algorithm>
#include <sstream>
#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGB = 1000000000;

// A clock the test advances by hand.
struct FakeClock {
  absl::Time now = absl::UnixEpoch();
  ProgressBar::Clock AsClock() {
    return [this] { return now; };
  }
};

ProgressBar::Options SmallThreshold() {
  ProgressBar::Options options;
  options.label = "bloom";
  options.min_total_bytes = 1000;
  options.bar_width = 10;
  return options;
}

int Redraws(const std::string& out) {
  return static_cast<int>(std::count(out.begin(), out.end(), '\r'));
}

TEST(ProgressBarTest, DrawsPercentBytesAndRate) {
  std::ostringstream out;
  FakeClock clock;
  ProgressBar bar(2 * kGB, SmallThreshold(), &out, /*out_is_tty=*/true, clock.AsClock());
  ASSERT_TRUE(bar.active());
  clock.now += absl::Seconds(2);
  bar.Update(kGB / 2);
  const std::string line = out.str();
  EXPECT_EQ(line[0], '\r');
  EXPECT_THAT(line, HasSubstr("bloom [==>       ]  25.0%"));
  EXPECT_THAT(line, HasSubstr("0.50 / 2.00 GB"));
  EXPECT_THAT(line, HasSubstr("250.0 MB/s"));
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(ProgressBarTest, RedrawsAtMostTenTimesASecond) {
  std::ostringstream out;
  FakeClock clock;
  ProgressBar bar(kGB, SmallThreshold(), &out, true, clock.AsClock());
  // 1000 updates over one simulated second: one every millisecond.
  for (int i = 1; i < 1000; ++i) {
    clock.now += absl::Milliseconds(1);
    bar.Update(static_cast<uint64_t>(i) * kGB / 1000);
  }
  const int redraws = Redraws(out.str());
  EXPECT_GE(redraws, 9);
  EXPECT_LE(redraws, 11);
}

TEST(ProgressBarTest, CompletionAlwaysDrawsAndFinishEndsTheLine) {
  std::ostringstream out;
  FakeClock clock;
  {
    ProgressBar bar(kGB, SmallThreshold(), &out, true, clock.AsClock());
    bar.Update(kGB / 3);
    clock.now += absl::Milliseconds(1);  // well inside the redraw interval...
    bar.Update(kGB);                     // ...but completion is always shown
    EXPECT_THAT(out.str(), HasSubstr("100.0%"));
    EXPECT_EQ(Redraws(out.str()), 2);
    bar.Finish();
    bar.Finish();                      // idempotent
    bar.Update(kGB);                   // ignored after Finish
  }                                    // destructor must not add another newline
  const std::string text = out.str();  // str() returns a copy: take it once
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_THAT(text, HasSubstr("[==========]"));
}

TEST(ProgressBarTest, ShorterLinePadsOverTheOldOne) {
  std::ostringstream out;
  FakeClock clock;
  ProgressBar bar(kGB, SmallThreshold(), &out, true, clock.AsClock());
  clock.now += absl::Milliseconds(1);
  bar.Update(kGB / 2);                            // very high rate: long "MB/s" string
  const size_t first_len = out.str().size() - 1;  // minus '\r'
  clock.now += absl::Seconds(1000);
  bar.Update(kGB / 2 + 1);  // much lower rate: shorter string, padded
  const std::string all = out.str();
  const std::string second = all.substr(all.rfind('\r') + 1);
  EXPECT_GE(second.size(), first_len);
}

TEST(ProgressBarTest, SilentWhenNotATty) {
  std::ostringstream out;
  FakeClock clock;
  {
    ProgressBar bar(10 * kGB, SmallThreshold(), &out, /*out_is_tty=*/false, clock.AsClock());
    EXPECT_FALSE(bar.active());
    bar.Update(kGB);
    bar.Update(10 * kGB);
  }
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressBarTest, SilentBelowThreshold) {
  std::ostringstream out;
  FakeClock clock;
  ProgressBar::Options options = SmallThreshold();
  options.min_total_bytes = 1000000;
  {
    ProgressBar bar(999999, options, &out, true, clock.AsClock());
    EXPECT_FALSE(bar.active());
    bar.Update(999999);
  }
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressBarTest, FinishWithoutAnyDrawIsSilent) {
  std::ostringstream out;
  FakeClock clock;
  { ProgressBar bar(kGB, SmallThreshold(), &out, true, clock.AsClock()); }
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressBarTest, CallbackAdapterAndTotalChange) {
  std::ostringstream out;
  FakeClock clock;
  ProgressBar bar(kGB, SmallThreshold(), &out, true, clock.AsClock());
  auto callback = bar.Callback();
  clock.now += absl::Seconds(1);
  callback(kGB, 4 * kGB);  // total replaced
  EXPECT_THAT(out.str(), HasSubstr(" 25.0%"));
  EXPECT_THAT(out.str(), HasSubstr("1.00 / 4.00 GB"));
}

TEST(ProgressBarTest, ZeroTotalShowsComplete) {
  std::ostringstream out;
  FakeClock clock;
  ProgressBar::Options options = SmallThreshold();
  options.min_total_bytes = 0;
  ProgressBar bar(0, options, &out, true, clock.AsClock());
  bar.Update(0);
  EXPECT_THAT(out.str(), HasSubstr("100.0%"));
  EXPECT_THAT(out.str(), HasSubstr("0.0 MB/s"));
}

TEST(ProgressBarTest, FormatBytes) {
  EXPECT_EQ(ProgressBar::FormatBytes(0), "0 B");
  EXPECT_EQ(ProgressBar::FormatBytes(999), "999 B");
  EXPECT_EQ(ProgressBar::FormatBytes(1500), "1.5 kB");
  EXPECT_EQ(ProgressBar::FormatBytes(2500000), "2.5 MB");
  EXPECT_EQ(ProgressBar::FormatBytes(352000000000), "352.00 GB");
  EXPECT_EQ(ProgressBar::FormatBytesOf(5, 120), "5 / 120 B");
  EXPECT_EQ(ProgressBar::FormatBytesOf(2500000, 352000000000), "0.00 / 352.00 GB");
  EXPECT_EQ(ProgressBar::FormatBytesOf(123400000, 500000000), "123.4 / 500.0 MB");
}

TEST(ProgressBarTest, StderrConstructorUnderTestIsInactive) {
  // Bazel runs tests with stderr redirected to a file: not a TTY, so nothing is drawn.
  ProgressBar bar(100 * kGB);
  EXPECT_FALSE(bar.active());
}

}  // namespace
}  // namespace blossom
