// JSON string literals: the one escaping routine every JSON writer in walrelay uses
// (`walrelay lag --json`, replay reports, the outbox helper's headers, dead-letter rows).
#pragma once

#include <string>
#include <string_view>

namespace walrelay {

// Appends the JSON string literal of `s` to *out: "..." with \" \\ \b \f \n \r \t and
// \u00XX for the other control characters. Bytes >= 0x80 are copied as they are (UTF-8
// stays UTF-8).
void AppendJsonQuoted(std::string* out, std::string_view s);

// The JSON string literal of `s` (see AppendJsonQuoted).
std::string JsonQuote(std::string_view s);

}  // namespace walrelay
