// SIGTERM and SIGINT for blossom-server's leader, received synchronously (sigwait) by one thread
// from start-up to exit.
//
// While the model loads (minutes for a large checkpoint, forever for a hung collective) there
// is nothing to drain, so a signal ends the process at once (exit 0): Kubernetes would otherwise
// wait out the grace period for its SIGKILL, and a load that finished would first report
// SERVING. Once serving, the first signal starts the drain (Wait returns), and a second one ends
// it at once, as a second Ctrl-C does in uvicorn and vLLM: the drain's wait for the calls in
// flight sees it (WaitForSecond) and stops, and the engine's shutdown cuts what is left. Later
// signals are only logged (the process is already on its way out).
//
// Thread-safety: every method may be called from any thread; the state is guarded by mu_ and
// every change is announced on cv_, so a waiter never misses a signal that came before it asked.
#ifndef BLOSSOM_SERVER_SHUTDOWN_SIGNAL_H_
#define BLOSSOM_SERVER_SHUTDOWN_SIGNAL_H_

#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace blossom {

// Blocks SIGTERM and SIGINT in the calling thread, and so in every thread it starts afterwards:
// call it first in main, before any thread exists, so that only sigwait receives them (never an
// asynchronous handler, never the default action). Returns the set.
sigset_t BlockShutdownSignals();

class ShutdownSignal {
 public:
  // Starts the receiving thread (detached) on `signals`, which BlockShutdownSignals blocked. The
  // thread may wake on a signal until the process is gone: allocate the object and never delete
  // it.
  explicit ShutdownSignal(sigset_t signals);
  ShutdownSignal(const ShutdownSignal&) = delete;
  ShutdownSignal& operator=(const ShutdownSignal&) = delete;

  // From now on a signal drains instead of exiting.
  void Serving();
  // Blocks until the first signal after Serving; returns its name ("SIGTERM", "SIGINT").
  const char* Wait();
  // Waits up to `timeout` for a second signal; true once one has come (at once when it came
  // earlier).
  bool WaitForSecond(std::chrono::milliseconds timeout);

  static const char* Name(int signal_number);

 private:
  void Receive(sigset_t signals);

  std::mutex mu_;
  std::condition_variable cv_;
  bool serving_ = false;  // guarded by mu_
  int received_ = 0;      // guarded by mu_: signals received while serving
  int first_ = 0;         // guarded by mu_: the first of them
};

}  // namespace blossom

#endif  // BLOSSOM_SERVER_SHUTDOWN_SIGNAL_H_
