#include "src/cli/log_format.h"

#include <spdlog/formatter.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

#include <ctime>
#include <string>

#include "base/json.h"

namespace walrelay::cli {

namespace {

constexpr const char* kTextPattern = "%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v";

class JsonFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto since_epoch = msg.time.time_since_epoch();
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
    const auto millis =
        std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch - secs).count();
    const std::time_t t = secs.count();
    std::tm tm{};
    localtime_r(&t, &tm);
    char stamp[64];
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    char zone[8];
    std::strftime(zone, sizeof(zone), "%z", &tm);  // +0100
    const std::string z(zone);
    std::string line = "{\"time\":\"";
    line += stamp;
    line += '.';
    line += std::to_string(1000 + millis).substr(1);
    line += z.size() == 5 ? z.substr(0, 3) + ":" + z.substr(3) : z;
    line += "\",\"level\":";
    const auto level = spdlog::level::to_string_view(msg.level);
    AppendJsonQuoted(&line, std::string_view(level.data(), level.size()));
    line += ",\"message\":";
    AppendJsonQuoted(&line, std::string_view(msg.payload.data(), msg.payload.size()));
    line += "}\n";
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

std::unique_ptr<spdlog::formatter> MakeJsonLogFormatter() {
  return std::make_unique<JsonFormatter>();
}

Status SetLogFormat(std::string_view format) {
  if (format == "text") {
    spdlog::set_formatter(std::make_unique<spdlog::pattern_formatter>(kTextPattern));
    return Status::Ok();
  }
  if (format == "json") {
    spdlog::set_formatter(MakeJsonLogFormatter());
    return Status::Ok();
  }
  return InvalidArgumentError("ops.log_format: expected text or json, got '" +
                              std::string(format) + "'");
}

}  // namespace walrelay::cli
