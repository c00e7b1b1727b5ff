// JSON string literals: the one escaping routine every JSON writer in walrelay uses
// (`walrelay lag --json`, replay reports, the outbox helper's headers, dead-letter rows).
#pragma once

#include <string>
#include <string_view>

namespace walrelay {

// Appends the JSON string literal of `s` to *out: "..." with \" \\ \b \f \n \r \t and
// \u00XX for the other control characters. Well-formed UTF-8 is copied as it is; a byte
// that does not start a well-formed sequence becomes \ufffd (the replacement character),
// so the output is always valid JSON in valid UTF-8 (a log line from arbitrary bytes, for
// one). Text PostgreSQL sent is valid UTF-8 and therefore passes unchanged.
void AppendJsonQuoted(std::string* out, std::string_view s);

// The JSON string literal of `s` (see AppendJsonQuoted).
std::string JsonQuote(std::string_view s);

}  // namespace walrelay
