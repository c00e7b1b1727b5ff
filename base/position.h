// The source position of a published event, carried in ONE Kafka header, `walrelay.position`:
//
//   lsn=16/B374D848;ordinal=3;xid=745;commit_time_us=1764681600000000;source=public.outbox
//
//   lsn             commit LSN of the source transaction (its Begin's final_lsn); for rows
//                   republished by lost-slot recovery, the new slot's consistent point
//   ordinal         position of the event among the transaction's outbox events, from 0;
//                   (lsn, ordinal) identifies an event's source position uniquely
//   xid             source transaction id (0 for recovered rows)
//   commit_time_us  commit time, microseconds since the Unix epoch. On rows republished
//                   (recovered=1: lost-slot recovery, `walrelay republish`) the commit
//                   time is unknown: the row's created_at, which precedes its commit, or 0
//                   without a created_at column. The inbox refuses a record whose time is
//                   older than its retention (src/inbox/inbox.h): it can no longer tell
//                   whether it applied it
//   recovered=1     present only on rows republished by lost-slot recovery
//   source          schema.table, or message:<prefix> for table-less events; always last:
//                   it is the rest of the value, so it may contain ';'
//
// One header instead of five: each Kafka header costs an allocation and encoding per
// record in librdkafka, the largest per-event cost of the relay (bench/README.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/headers.h"
#include "base/lsn.h"

namespace walrelay {

inline constexpr std::string_view kPositionHeader = headers::kPosition;

struct SourcePosition {
  Lsn lsn;
  uint32_t ordinal = 0;
  uint32_t xid = 0;
  int64_t commit_time_us = 0;
  bool recovered = false;
  std::string_view source;  // a view into the parsed text, or the caller's string
};

// Replaces *out with the header value. Allocation-free once *out has capacity.
void FormatPosition(const SourcePosition& position, std::string* out);

// Parses a header value written by FormatPosition; nullopt when malformed.
std::optional<SourcePosition> ParsePosition(std::string_view text);

}  // namespace walrelay
