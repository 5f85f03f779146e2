#include "engine/loader/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace blossom {

ProgressBar::ProgressBar(uint64_t total_bytes, Options options)
    : ProgressBar(total_bytes, std::move(options), &std::cerr, ::isatty(STDERR_FILENO) == 1,
                  [] { return absl::Now(); }) {}

ProgressBar::ProgressBar(uint64_t total_bytes, Options options, std::ostream* out, bool out_is_tty,
                         Clock clock)
    : total_(total_bytes),
      options_(std::move(options)),
      out_(out),
      clock_(std::move(clock)),
      active_(out != nullptr && out_is_tty && total_bytes >= options_.min_total_bytes),
      start_(clock_()) {}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Update(uint64_t done_bytes, uint64_t total_bytes) {
  if (!active_ || finished_) return;
  total_ = total_bytes;
  done_ = done_bytes;
  absl::Time now = clock_();
  if (now - last_draw_ >= options_.min_redraw_interval || done_ >= total_) Draw(now);
}

void ProgressBar::Finish() {
  if (finished_) return;
  finished_ = true;
  if (!active_ || !drawn_) return;
  Draw(clock_());
  *out_ << '\n' << std::flush;
}

std::string ProgressBar::FormatBytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < 1000) return absl::StrCat(bytes, " B");
  if (b < 1e6) return absl::StrFormat("%.1f kB", b / 1e3);
  if (b < 1e9) return absl::StrFormat("%.1f MB", b / 1e6);
  return absl::StrFormat("%.2f GB", b / 1e9);
}

std::string ProgressBar::FormatBytesOf(uint64_t done, uint64_t total) {
  const double d = static_cast<double>(done), t = static_cast<double>(total);
  if (total < 1000) return absl::StrCat(done, " / ", total, " B");
  if (t < 1e6) return absl::StrFormat("%.1f / %.1f kB", d / 1e3, t / 1e3);
  if (t < 1e9) return absl::StrFormat("%.1f / %.1f MB", d / 1e6, t / 1e6);
  return absl::StrFormat("%.2f / %.2f GB", d / 1e9, t / 1e9);
}

void ProgressBar::Draw(absl::Time now) {
  const double fraction =
      total_ == 0 ? 1.0 : std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_));
  const int width = std::max(1, options_.bar_width);
  const int filled = static_cast<int>(fraction * width);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < width) {
    bar += '>';
    bar.append(static_cast<size_t>(width - filled - 1), ' ');
  }
  const double seconds = absl::ToDoubleSeconds(now - start_);
  const double mb_per_s = seconds > 0 ? static_cast<double>(done_) / 1e6 / seconds : 0.0;
  std::string line = absl::StrFormat("%s [%s] %5.1f%%  %s  %.1f MB/s", options_.label, bar,
                                     fraction * 100.0, FormatBytesOf(done_, total_), mb_per_s);
  // Blank out leftovers of a longer previous line (a shrinking rate string, say).
  const size_t width_now = line.size();
  if (line.size() < last_width_) line.append(last_width_ - line.size(), ' ');
  last_width_ = width_now;
  *out_ << '\r' << line << std::flush;
  drawn_ = true;
  last_draw_ = now;
}

}  // namespace blossom
