// Lsn: a PostgreSQL WAL position (XLogRecPtr), with the server's "X/Y" text form
// (upper 32 bits / lower 32 bits, upper-case hex, no padding), e.g. "16/B374D848".
// Thread safety: a value type.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace walrelay {

struct Lsn {
  uint64_t value = 0;

  constexpr Lsn() = default;
  constexpr explicit Lsn(uint64_t v) : value(v) {}

  static constexpr Lsn Invalid() { return Lsn(0); }
  constexpr bool valid() const { return value != 0; }

  // "X/Y" as PostgreSQL prints it.
  std::string ToString() const;
  // Parses "X/Y" (hex, either case, each half at most 8 digits). nullopt on bad input.
  static std::optional<Lsn> Parse(std::string_view text);

  friend constexpr auto operator<=>(Lsn, Lsn) = default;
};

}  // namespace walrelay
