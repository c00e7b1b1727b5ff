// RepeatedLineFilter: keeps librdkafka's repeated lines from burying the one that says what
// to do. While a broker is down, librdkafka logs the same failure at every reconnect
// backoff, per broker and per client ("Connect to ipv4#10.0.0.7:9092 failed: Connection
// refused (after 0ms in state CONNECT, 3 identical error(s) suppressed)"): thousands of
// lines an hour around walrelay's own, which name the cost and the fix.
//
// A line's shape is its text with every number that stands alone (after a space, '(', ','
// or '=') made one '#', so lines that differ only in counts and durations are one shape,
// while a line about another broker (its address and id are kept) is a shape of its own. The first line of a shape is let
// through; the same shape again within `window` is held back and counted; the first one
// after the window is let through with how many were held back. At most `max_shapes`
// shapes are remembered (the oldest forgotten first), so memory stays bounded whatever
// librdkafka says.
//
// Thread safety: Admit may be called from any thread (librdkafka logs from its own).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace walrelay::kafka {

class RepeatedLineFilter {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RepeatedLineFilter(std::chrono::milliseconds window = std::chrono::seconds(60),
                              size_t max_shapes = 256)
      : window_(window), max_shapes_(max_shapes) {}

  // nullopt: hold the line back. Otherwise log it, followed by the returned text ("" or
  // " (12 similar lines in the last 60 s not shown)").
  std::optional<std::string> Admit(std::string_view line, Clock::time_point now);

  // The shape of `line` (standalone numbers made '#'). Exposed for tests.
  static std::string Shape(std::string_view line);

 private:
  struct Seen {
    Clock::time_point shown_at;  // when a line of this shape was last let through
    uint64_t held = 0;           // held back since
    std::list<std::string>::iterator age;
  };
  std::chrono::milliseconds window_;
  size_t max_shapes_;
  std::mutex mutex_;
  std::unordered_map<std::string, Seen> seen_;
  std::list<std::string> ages_;  // shapes, the most recently shown last
};

}  // namespace walrelay::kafka
