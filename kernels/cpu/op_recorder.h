// The CPU backend's step capture (Backend::BeginCapture): while capturing, each op is stored as a
// closure over its arguments instead of running, and the graph replays the closures in order.
//
// A CPU replay saves nothing (the ops cost what they cost); it exists so that the engine's graph
// path runs, and is tested, on every machine under the rules a CUDA graph imposes: the backend
// refuses copies, allocation and waits while capturing (RefuseWhileCapturing), and a replay sees
// only what changed in memory, never new host-side arguments.
//
// Thread-safety: Begin, End and Record are called by the thread that issues the backend's ops;
// capturing() may be read from any thread (Allocate is thread-safe).
#ifndef BLOSSOM_KERNELS_CPU_OP_RECORDER_H_
#define BLOSSOM_KERNELS_CPU_OP_RECORDER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"

namespace blossom {

class OpRecorder {
 public:
  using Op = std::function<absl::Status()>;

  bool capturing() const { return capturing_.load(std::memory_order_acquire); }
  // FailedPrecondition when a capture is already open.
  absl::Status Begin();
  // The ops recorded since Begin, as a graph. FailedPrecondition without an open capture.
  absl::StatusOr<std::unique_ptr<StepGraph>> End();
  // While capturing: keeps `op` for the graph and returns true (the caller must not run it).
  // Otherwise returns false: the caller runs the op now. A template, so that the std::function
  // (a heap allocation for the ops' captures) is made only while capturing, not on every op.
  template <typename F>
  bool Record(F&& op) {
    if (!capturing()) return false;
    ops_.emplace_back(std::forward<F>(op));
    return true;
  }
  // FailedPrecondition naming `what` while capturing (a CUDA graph could not hold it); OK
  // otherwise.
  absl::Status RefuseWhileCapturing(absl::string_view what) const;

 private:
  std::atomic<bool> capturing_{false};
  std::vector<Op> ops_;
};

}  // namespace blossom

#endif  // BLOSSOM_KERNELS_CPU_OP_RECORDER_H_
