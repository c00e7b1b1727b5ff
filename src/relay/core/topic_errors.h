// TopicErrors: Kafka topics that fail for a reason of their own (the topic does not exist,
// the relay may not write to it), remembered across sessions so that retrying them is
// bounded (invariant 7: one bad event never stops the others).
//
// A topic's first failure starts its clock. Until `timeout` has passed the relay retries
// (the session restarts; /readyz names the topic and the reason); afterwards its events are
// dead-lettered with the reason until a record of the topic is acknowledged (Clear). The
// clock measures one continuous failure (invariant 13): a failure that comes more than
// max(timeout, retry_gap) after the topic's previous one (the relay stood by, or the topic
// had no events meanwhile) starts a new clock; a topic that fails at every attempt reaches
// the bound. `retry_gap` is the longest time between two attempts of a failing topic (the
// session's reconnect backoff and a topic check), so that a bound shorter than that still
// ends in dead letters instead of a new clock at every attempt. Only
// an acknowledgement clears a failure: metadata shows that a topic exists and may be
// described, not that the relay may write to it (a Write ACL), so a check that finds the
// topic would restart the clock of a topic that refuses every record, for ever.
//
// Thread safety: all methods may be called from any thread (the pipeline writes, /readyz
// and /metrics read).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "base/status.h"

namespace walrelay::relay {

class TopicErrors {
 public:
  using Clock = std::chrono::steady_clock;
  explicit TopicErrors(std::chrono::milliseconds timeout,
                       std::chrono::milliseconds retry_gap = std::chrono::milliseconds(0))
      : timeout_(timeout), forget_after_(std::max(timeout, retry_gap)) {}

  // Records that `topic` failed with `reason`. True when it has been failing for at least
  // the timeout: dead-letter its events.
  bool Fail(std::string_view topic, std::string_view reason, Clock::time_point now = Clock::now());
  // `topic` works (again): a record of it was acknowledged.
  void Clear(std::string_view topic);
  // Whether any topic is failing; lock-free, for the path of every acknowledgement.
  bool any() const { return count_.load(std::memory_order_relaxed) != 0; }
  // OK while no topic is within its retry period; else kUnavailable naming each such
  // topic, its reason and when its events start to be dead-lettered.
  Status Readiness(Clock::time_point now = Clock::now()) const;
  // Topics failing now (retried or dead-lettered).
  size_t failing() const;
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Entry {
    Clock::time_point since;  // when this continuous failure began
    Clock::time_point last;   // the latest failure seen
    std::string reason;
  };
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds forget_after_;  // a quiet gap this long ends a failure
  mutable std::mutex mu_;
  std::map<std::string, Entry, std::less<>> topics_;
  std::atomic<size_t> count_{0};  // topics_.size()
};

}  // namespace walrelay::relay
