// PostgreSQL server versions (PQserverVersion numbering: 170004 is 17.4) at which the slot
// features walrelay uses appear. One place for each threshold; callers compare against
// these, never against a literal.
#pragma once

namespace walrelay::slot {

// pg_replication_slots.conflicting (a logical slot invalidated on a standby).
inline constexpr int kPgVersionSlotConflicting = 160000;
// Failover slots (CREATE_REPLICATION_SLOT ... FAILOVER, pg_create_logical_replication_slot's
// fifth argument, pg_replication_slots.failover), and pg_replication_slots'
// invalidation_reason and inactive_since.
inline constexpr int kPgVersionFailoverSlots = 170000;

inline constexpr bool SupportsFailoverSlots(int server_version) {
  return server_version >= kPgVersionFailoverSlots;
}

}  // namespace walrelay::slot
