// Sizes as the configuration and the operator write them ("512MB", "1.5GB"), and the slot
// guard's warn and critical thresholds: parsed by the configuration's validation
// (config.cc), applied by the slot guard (lifecycle/slot_guard.h) and `walrelay lag`.
//
// Thread safety: free functions and value types; reentrant.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace walrelay::relay {

// "512MB", "1.5GB", "64kB", "1048576" (bytes), "10 MB". Units are 1024-based as in
// PostgreSQL: B, kB/KB/KiB, MB/MiB, GB/GiB, TB/TiB (case-insensitive). kInvalidArgument
// on anything else.
Result<uint64_t> ParseByteSize(std::string_view text);
// Human units, 1024-based like pg_size_pretty: "812 B", "12.0 kB", "1.5 MB", "3.25 GB".
std::string FormatBytes(uint64_t bytes);

// What `walrelay setup` and `walrelay run`'s start checks say about an unlimited
// max_slot_wal_keep_size, in one place. The example bound is above the guard's default
// critical threshold (8GB), so the guard pages before the server gives the slot up.
inline constexpr std::string_view kUnlimitedSlotWalWarning =
    "max_slot_wal_keep_size = -1 (unlimited): while walrelay is stopped or stuck, its slot "
    "keeps every WAL segment and can fill the server's disk, which stops PostgreSQL for all "
    "applications. Fix: bound it above the longest relay outage you tolerate at your WAL "
    "rate and above --guard-critical (8GB by default), e.g. ALTER SYSTEM SET "
    "max_slot_wal_keep_size = '16GB'; SELECT pg_reload_conf(); — past the bound the slot is "
    "invalidated (wal_status 'lost') instead of the disk filling up, and walrelay recovers it "
    "from the outbox rows still in the table (docs/operations.md, section 1)";

// A warn or critical threshold: absolute bytes, or a fraction of max_slot_wal_keep_size.
struct Threshold {
  enum class Kind { kNone, kBytes, kFraction };
  Kind kind = Kind::kNone;
  uint64_t bytes = 0;   // kBytes
  double fraction = 0;  // kFraction, in (0, 1]

  static Threshold None() { return {}; }
  static Threshold Bytes(uint64_t b) { return {Kind::kBytes, b, 0}; }
  static Threshold Fraction(double f) { return {Kind::kFraction, 0, f}; }

  // "" or "none" → kNone; "0.5" or "50%" → fraction (a number with a '.' and no unit must
  // be in (0, 1]); otherwise ParseByteSize ("512MB", "1073741824").
  static Result<Threshold> Parse(std::string_view text);

  // The threshold in bytes for a server whose max_slot_wal_keep_size is `max_keep_bytes`
  // (-1 = unlimited). nullopt for kNone, and for a fraction when unlimited (a fraction of
  // infinity does not apply; StartupChecks warns about it).
  std::optional<uint64_t> Resolve(int64_t max_keep_bytes) const;

  std::string ToString() const;  // "none", "512.0 MB", "0.5 of max_slot_wal_keep_size"
};

}  // namespace walrelay::relay
