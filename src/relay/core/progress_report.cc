#include "src/relay/core/progress_report.h"

#include <fmt/format.h>

#include "base/lsn.h"

namespace walrelay::relay {

std::optional<std::string> ProgressReport::Due(const RelayStats& stats, Clock::time_point now) {
  if (!since_) {
    since_ = now;
    published_ = stats.events_acked.load(std::memory_order_relaxed);
    dead_lettered_ = stats.events_dead_lettered.load(std::memory_order_relaxed);
    restarts_ = stats.restarts.load(std::memory_order_relaxed);
    return std::nullopt;
  }
  if (now - *since_ < interval_) return std::nullopt;
  const uint64_t published = stats.events_acked.load(std::memory_order_relaxed);
  const uint64_t dead = stats.events_dead_lettered.load(std::memory_order_relaxed);
  const uint64_t restarts = stats.restarts.load(std::memory_order_relaxed);
  const double seconds = std::chrono::duration<double>(now - *since_).count();
  const uint64_t new_published = published - published_;
  const uint64_t new_dead = dead - dead_lettered_;
  const uint64_t new_restarts = restarts - restarts_;
  since_ = now;
  published_ = published;
  dead_lettered_ = dead;
  restarts_ = restarts;
  if (new_published == 0 && new_dead == 0) return std::nullopt;

  std::string line = fmt::format("progress: {} events published (+{} in {:.0f} s, {:.0f}/s)",
                                 published, new_published, seconds, new_published / seconds);
  if (dead != 0) line += fmt::format(", {} dead-lettered (+{})", dead, new_dead);
  if (const uint64_t flush = stats.flush_lsn.load(std::memory_order_relaxed); flush != 0) {
    line += ", confirmed up to " + Lsn(flush).ToString();
  }
  if (const int64_t lag = stats.heartbeat_lag_us.load(std::memory_order_relaxed); lag >= 0) {
    line += fmt::format(", end-to-end lag {} ms", lag / 1000);
  }
  if (stats.polling.load(std::memory_order_relaxed) == 1) {
    line += fmt::format(", {} rows unpublished", stats.poll_backlog_rows.load());
  } else {
    line += fmt::format(", in flight {}", stats.in_flight_events.load());
  }
  if (new_restarts != 0) {
    line += fmt::format("; {} session restart{} (the log above says why)", new_restarts,
                        new_restarts == 1 ? "" : "s");
  }
  return line;
}

}  // namespace walrelay::relay
