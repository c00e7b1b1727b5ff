#include "src/kafka/log_repeats.h"

#include <cctype>

namespace walrelay::kafka {

std::string RepeatedLineFilter::Shape(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size();) {
    const bool digit = std::isdigit(static_cast<unsigned char>(line[i]));
    // A number standing alone ("after 0ms", "3 identical error(s)"), not part of an address
    // or a name ("127.0.0.1:9092/1", "ipv4#10.0.0.7", "rdk:broker2"): lines about another
    // broker stay lines of their own.
    const char before = i == 0 ? ' ' : line[i - 1];
    if (digit && (before == ' ' || before == '(' || before == ',' || before == '=')) {
      size_t end = i;
      while (end < line.size() && std::isdigit(static_cast<unsigned char>(line[end]))) ++end;
      const char after = end < line.size() ? line[end] : ' ';
      if (after != '.' && after != ':' && after != '/') {  // else an address: "10.0.0.7:9092"
        out.push_back('#');
        i = end;
        continue;
      }
    }
    out.push_back(line[i++]);
  }
  return out;
}

std::optional<std::string> RepeatedLineFilter::Admit(std::string_view line,
                                                     Clock::time_point now) {
  std::string shape = Shape(line);
  std::lock_guard lock(mutex_);
  auto it = seen_.find(shape);
  if (it == seen_.end()) {
    if (seen_.size() >= max_shapes_) {
      seen_.erase(ages_.front());
      ages_.pop_front();
    }
    ages_.push_back(shape);
    seen_.emplace(std::move(shape), Seen{now, 0, std::prev(ages_.end())});
    return std::string();
  }
  Seen& s = it->second;
  if (now - s.shown_at < window_) {
    ++s.held;
    return std::nullopt;
  }
  std::string note;
  if (s.held != 0) {
    note = " (" + std::to_string(s.held) + " similar line" + (s.held == 1 ? "" : "s") +
           " in the last " +
           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - s.shown_at).count()) +
           " s not shown)";
  }
  s.shown_at = now;
  s.held = 0;
  ages_.splice(ages_.end(), ages_, s.age);  // the most recently shown last
  return note;
}

}  // namespace walrelay::kafka
