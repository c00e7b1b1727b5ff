// LogCapture: what walrelay (and librdkafka through it) logged while the capture lived, for
// tests that must show a premise happened that only the log says (a request timed out, a
// consumer saw its topic missing). The default spdlog logger is replaced by one that writes
// to the previous logger's sinks and to a ring buffer; the destructor restores it.
// Thread-safe: Contains() may run while other threads log.
#pragma once

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace walrelay::testing {

class LogCapture {
 public:
  explicit LogCapture(size_t lines = 20000)
      : previous_(spdlog::default_logger()),
        ring_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(lines)) {
    std::vector<spdlog::sink_ptr> sinks(previous_->sinks().begin(), previous_->sinks().end());
    sinks.push_back(ring_);
    auto logger = std::make_shared<spdlog::logger>("capture", sinks.begin(), sinks.end());
    logger->set_level(std::min(previous_->level(), spdlog::level::info));
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Whether a line logged since the capture began contains `text`.
  bool Contains(std::string_view text) const { return !Lines(text).empty(); }

  // The captured lines that contain `text` (every line when it is empty).
  std::vector<std::string> Lines(std::string_view text = {}) const {
    std::vector<std::string> out;
    for (std::string& line : ring_->last_formatted()) {
      if (line.find(text) != std::string::npos) out.push_back(std::move(line));
    }
    return out;
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> ring_;
};

}  // namespace walrelay::testing
