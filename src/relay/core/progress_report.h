// ProgressReport: the periodic summary line `walrelay run` logs while events flow, so that
// an operator reading the log (not the metrics) sees that the relay is moving, how fast and
// where it stands: "progress: 120000 events published (+12000 in 60 s, 200/s), 2
// dead-lettered (+1), confirmed up to 0/5A1B2C8, end-to-end lag 120 ms, in flight 15".
// Nothing is said for an interval in which no event was published or dead-lettered (an
// idle relay does not fill the log); the first line comes one interval after the start.
//
// Thread safety: one caller (the thread running the session or the poller); `stats` may be
// written by others meanwhile (each value is read once, relaxed).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "src/relay/core/relay_stats.h"

namespace walrelay::relay {

class ProgressReport {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kInterval{60};

  explicit ProgressReport(std::chrono::milliseconds interval = kInterval)
      : interval_(interval) {}

  // The line to log when an interval has passed since the last one (or since the first
  // call) and events moved in it; nullopt otherwise. Cheap when not due.
  std::optional<std::string> Due(const RelayStats& stats, Clock::time_point now);

 private:
  std::chrono::milliseconds interval_;
  std::optional<Clock::time_point> since_;
  uint64_t published_ = 0;  // at since_
  uint64_t dead_lettered_ = 0;
  uint64_t restarts_ = 0;
};

}  // namespace walrelay::relay
