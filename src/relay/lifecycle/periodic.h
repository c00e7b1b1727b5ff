// PeriodicThread: a background thread that runs a round, then waits `interval` (or until
// Stop()), again and again. The one way the relay's side tasks (the slot guard, the outbox
// janitor) run beside the stream: Stop() wakes the wait at once, and a round that paces
// itself sleeps with SleepUntil(), which Stop() ends too.
// Thread safety: Start()/Stop() from one thread; SleepUntil() from the round.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace walrelay::relay {

class PeriodicThread {
 public:
  PeriodicThread() = default;
  ~PeriodicThread() { Stop(); }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  // Starts the thread (no-op while it runs): `round` at once, then after every interval.
  void Start(std::chrono::milliseconds interval, std::function<void()> round) {
    if (thread_.joinable()) return;
    {
      std::lock_guard lock(mu_);
      stop_ = false;
    }
    thread_ = std::thread([this, interval, round = std::move(round)] {
      std::unique_lock lock(mu_);
      while (!stop_) {
        lock.unlock();
        round();
        lock.lock();
        cv_.wait_for(lock, interval, [this] { return stop_; });
      }
    });
  }

  // Ends the wait (and any SleepUntil) and joins the thread; the round in progress, if
  // any, finishes first.
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // Waits until `deadline`; false when Stop() was called (the round should return).
  bool SleepUntil(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mu_);
    return !cv_.wait_until(lock, deadline, [this] { return stop_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace walrelay::relay
