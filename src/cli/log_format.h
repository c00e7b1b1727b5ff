// How walrelay writes its log lines (spdlog's default logger, stderr):
//   text  "2026-12-03T09:00:00.123+00:00 info message" — local time with its UTC offset
//   json  one JSON object per line: {"time":"2026-12-03T09:00:00.123+00:00",
//         "level":"info","message":"..."} — for log shippers; the message is escaped, so
//         any text (quotes, newlines, bytes from the server) stays one valid line.
// Set once at start, before other threads log.
#pragma once

#include <memory>
#include <string_view>

#include "base/status.h"

namespace spdlog {
class formatter;
}

namespace walrelay::cli {

// Applies `format` ("text" or "json") to the default logger; kInvalidArgument otherwise.
Status SetLogFormat(std::string_view format);

// The JSON formatter itself (for tests).
std::unique_ptr<spdlog::formatter> MakeJsonLogFormatter();

}  // namespace walrelay::cli
