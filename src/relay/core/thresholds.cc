#include "src/relay/core/thresholds.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace walrelay::relay {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Parses a non-negative decimal number ("12", "1.5"); false on anything else.
bool ParseNumber(std::string_view text, double* out) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || c == '.')) return false;
  }
  std::string s(text);
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end != nullptr && *end == '\0' && std::isfinite(*out);
}

}  // namespace

// ---------------------------------------------------------------------------- sizes

Result<uint64_t> ParseByteSize(std::string_view text) {
  const std::string_view t = Trim(text);
  size_t i = 0;
  while (i < t.size() && ((t[i] >= '0' && t[i] <= '9') || t[i] == '.')) ++i;
  double number = 0;
  if (!ParseNumber(t.substr(0, i), &number)) {
    return InvalidArgumentError("'" + std::string(text) +
                                "' is not a size (examples: 1048576, 512MB, 1.5GB)");
  }
  const std::string unit = Lower(Trim(t.substr(i)));
  double factor = 0;
  if (unit.empty() || unit == "b") {
    factor = 1;
  } else if (unit == "kb" || unit == "kib" || unit == "k") {
    factor = 1024.0;
  } else if (unit == "mb" || unit == "mib" || unit == "m") {
    factor = 1024.0 * 1024;
  } else if (unit == "gb" || unit == "gib" || unit == "g") {
    factor = 1024.0 * 1024 * 1024;
  } else if (unit == "tb" || unit == "tib" || unit == "t") {
    factor = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return InvalidArgumentError("'" + std::string(text) + "': unknown unit '" + unit +
                                "' (use B, kB, MB, GB or TB; 1024-based)");
  }
  const double bytes = number * factor;
  if (bytes >= 1.8e19) return InvalidArgumentError("'" + std::string(text) + "' is too large");
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf,
                v >= 100  ? "%.0f %s"
                : v >= 10 ? "%.1f %s"
                          : "%.2f %s",
                v, kUnits[u]);
  return buf;
}

// ---------------------------------------------------------------------------- Threshold

Result<Threshold> Threshold::Parse(std::string_view text) {
  const std::string t = Lower(Trim(text));
  if (t.empty() || t == "none" || t == "off") return Threshold::None();
  if (t.back() == '%') {
    double pct = 0;
    if (!ParseNumber(Trim(std::string_view(t).substr(0, t.size() - 1)), &pct) || pct <= 0 ||
        pct > 100) {
      return InvalidArgumentError("threshold '" + std::string(text) +
                                  "': a percentage must be in (0%, 100%]");
    }
    return Threshold::Fraction(pct / 100);
  }
  double number = 0;
  if (t.find('.') != std::string::npos && ParseNumber(t, &number)) {
    if (number <= 0 || number > 1) {
      return InvalidArgumentError("threshold '" + std::string(text) +
                                  "': a fraction of max_slot_wal_keep_size must be in (0, 1]; "
                                  "write bytes with a unit, e.g. 512MB");
    }
    return Threshold::Fraction(number);
  }
  auto bytes = ParseByteSize(t);
  if (!bytes.ok()) {
    return InvalidArgumentError("threshold '" + std::string(text) +
                                "' is neither a size (512MB, 1GB, 1048576) nor a fraction of "
                                "max_slot_wal_keep_size (0.5, 80%)");
  }
  return Threshold::Bytes(*bytes);
}

std::optional<uint64_t> Threshold::Resolve(int64_t max_keep_bytes) const {
  switch (kind) {
    case Kind::kNone:
      return std::nullopt;
    case Kind::kBytes:
      return bytes;
    case Kind::kFraction:
      if (max_keep_bytes < 0) return std::nullopt;
      return static_cast<uint64_t>(std::llround(fraction * static_cast<double>(max_keep_bytes)));
  }
  return std::nullopt;
}

std::string Threshold::ToString() const {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kBytes:
      return FormatBytes(bytes);
    case Kind::kFraction: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%g of max_slot_wal_keep_size", fraction);
      return buf;
    }
  }
  return "none";
}

}  // namespace walrelay::relay
