// A one-line terminal progress bar for loading large checkpoints.
//
// It draws only when the output is a terminal and the job is big enough to be worth watching:
// logs and CI output stay free of carriage-return noise, and a 1 MB test model loads silently.
#ifndef BLOSSOM_ENGINE_LOADER_PROGRESS_BAR_H_
#define BLOSSOM_ENGINE_LOADER_PROGRESS_BAR_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "absl/time/time.h"

namespace blossom {

struct ProgressBarOptions {
  std::string label = "loading";
  // Below this total nothing is drawn: small models load too fast to need a bar.
  uint64_t min_total_bytes = uint64_t{1} << 30;
  absl::Duration min_redraw_interval = absl::Milliseconds(100);
  int bar_width = 30;
};

// Draws "label [=====>    ]  42.0%  1.23 / 2.93 GB  850.1 MB/s" with '\r' redraws, at most once
// per `min_redraw_interval` (plus the final state), and ends the line with '\n' on Finish.
// Thread-safety: not thread-safe; drive it from one thread (e.g. as Checkpoint::Prefetch's
// callback). Invariant: nothing is ever written when !active().
class ProgressBar {
 public:
  using Options = ProgressBarOptions;
  using Clock = std::function<absl::Time()>;

  // Draws to stderr if it is a TTY.
  explicit ProgressBar(uint64_t total_bytes, Options options = {});
  // For tests and other sinks: `out_is_tty` decides whether drawing is allowed at all.
  ProgressBar(uint64_t total_bytes, Options options, std::ostream* out, bool out_is_tty,
              Clock clock);
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  ~ProgressBar();  // calls Finish()

  bool active() const { return active_; }

  // Records progress; redraws if the redraw interval has passed or the job is complete.
  // A different `total_bytes` replaces the total (e.g. a second pass over other files).
  void Update(uint64_t done_bytes, uint64_t total_bytes);
  void Update(uint64_t done_bytes) { Update(done_bytes, total_); }

  // Draws the final state and a newline (only if anything was drawn). Idempotent.
  void Finish();

  // Adapter for Checkpoint::Prefetch's ProgressCallback. The bar must outlive the callback.
  std::function<void(uint64_t, uint64_t)> Callback() {
    return [this](uint64_t done, uint64_t total) { Update(done, total); };
  }

  // "512 B", "1.5 MB", "2.93 GB" (decimal units, as download tools show).
  static std::string FormatBytes(uint64_t bytes);
  // "0.50 / 2.00 GB": both in the unit FormatBytes picks for `total`, so the numbers line up.
  static std::string FormatBytesOf(uint64_t done, uint64_t total);

 private:
  void Draw(absl::Time now);

  uint64_t total_;
  Options options_;
  std::ostream* out_;
  Clock clock_;
  bool active_;
  bool drawn_ = false;
  bool finished_ = false;
  uint64_t done_ = 0;
  absl::Time start_;
  absl::Time last_draw_ = absl::InfinitePast();
  size_t last_width_ = 0;
};

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_LOADER_PROGRESS_BAR_H_
