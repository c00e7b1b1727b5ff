#include "src/relay/core/topic_errors.h"

#include <spdlog/spdlog.h>

namespace walrelay::relay {

bool TopicErrors::Fail(std::string_view topic, std::string_view reason, Clock::time_point now) {
  std::lock_guard lock(mu_);
  auto it = topics_.find(topic);
  const bool new_failure = it == topics_.end() || now - it->second.last > forget_after_;
  if (it == topics_.end()) {
    it = topics_.emplace(std::string(topic), Entry{now, now, std::string(reason)}).first;
    count_.store(topics_.size(), std::memory_order_relaxed);
  } else if (new_failure) {
    it->second.since = now;  // nothing failed for a whole bound: not the same failure
  }
  it->second.last = now;
  it->second.reason = reason;
  if (new_failure) {
    spdlog::error(
        "kafka topic {} fails: {}; retrying (session restarts) for up to {} ms "
        "(--kafka-topic-error-timeout-ms), then its events are dead-lettered: create the "
        "topic or grant the relay's principal Write on it",
        topic, reason, timeout_.count());
  }
  return now - it->second.since >= timeout_;
}

void TopicErrors::Clear(std::string_view topic) {
  std::lock_guard lock(mu_);
  auto it = topics_.find(topic);
  if (it == topics_.end()) return;
  spdlog::info("kafka topic {} works again", topic);
  topics_.erase(it);
  count_.store(topics_.size(), std::memory_order_relaxed);
}

Status TopicErrors::Readiness(Clock::time_point now) const {
  std::lock_guard lock(mu_);
  std::string failing;
  for (const auto& [topic, e] : topics_) {
    const auto left = std::chrono::duration_cast<std::chrono::seconds>(e.since + timeout_ - now);
    if (left.count() < 0) continue;  // dead-lettering: the stream moves
    if (!failing.empty()) failing += "; ";
    failing += "kafka topic " + topic + ": " + e.reason + " (its events are dead-lettered in " +
               std::to_string(left.count()) + " s unless it works by then)";
  }
  return failing.empty() ? Status::Ok() : UnavailableError(failing);
}

size_t TopicErrors::failing() const {
  std::lock_guard lock(mu_);
  return topics_.size();
}

}  // namespace walrelay::relay
