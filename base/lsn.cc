#include "base/lsn.h"

#include <charconv>
#include <cstdio>

namespace walrelay {

std::string Lsn::ToString() const {
  char buf[32];
  int n = std::snprintf(buf, sizeof buf, "%X/%X", static_cast<unsigned>(value >> 32),
                        static_cast<unsigned>(value & 0xffffffffu));
  return std::string(buf, n);
}

std::optional<Lsn> Lsn::Parse(std::string_view text) {
  auto slash = text.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  auto parse_half = [](std::string_view s) -> std::optional<uint32_t> {
    if (s.empty() || s.size() > 8) return std::nullopt;
    uint32_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
    if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
    return v;
  };
  auto hi = parse_half(text.substr(0, slash));
  auto lo = parse_half(text.substr(slash + 1));
  if (!hi || !lo) return std::nullopt;
  return Lsn((static_cast<uint64_t>(*hi) << 32) | *lo);
}

}  // namespace walrelay
