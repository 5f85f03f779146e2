#include "server/shutdown_signal.h"

#include <cstdlib>
#include <thread>

#include "spdlog/spdlog.h"

namespace blossom {

sigset_t BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

ShutdownSignal::ShutdownSignal(sigset_t signals) {
  std::thread([this, signals] { Receive(signals); }).detach();
}

void ShutdownSignal::Receive(sigset_t signals) {
  while (true) {
    int number = 0;
    if (sigwait(&signals, &number) != 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (!serving_) {
      spdlog::info("received {} while loading: exiting", Name(number));
      std::_Exit(0);  // nothing is in flight; the model's threads need no unwinding
    }
    if (++received_ == 1) {
      first_ = number;
    } else if (received_ == 2) {
      spdlog::warn("received {} again: ending the drain now", Name(number));
    } else {
      spdlog::info("received {} again: already stopping", Name(number));
    }
    cv_.notify_all();
  }
}

void ShutdownSignal::Serving() {
  std::lock_guard<std::mutex> lock(mu_);
  serving_ = true;
}

const char* ShutdownSignal::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return received_ >= 1; });
  return Name(first_);
}

bool ShutdownSignal::WaitForSecond(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return received_ >= 2; });
}

const char* ShutdownSignal::Name(int signal_number) {
  return signal_number == SIGTERM ? "SIGTERM" : "SIGINT";
}

}  // namespace blossom
