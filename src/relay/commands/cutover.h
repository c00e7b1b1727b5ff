// Taking over a logical slot that another CDC reader filled (Debezium's PostgreSQL
// connector with the Outbox Event Router): what `walrelay cutover debezium` checks before
// it streams from that slot (docs/migrating-from-debezium.md).
//
// Why reading the same slot is the zero-gap cut-over: the slot's confirmed_flush_lsn is
// what the previous reader confirmed, and PostgreSQL streams every transaction that
// committed after it. The previous reader confirms only what it has written to Kafka, so
// nothing is lost; what it wrote but had not confirmed yet comes again (consumers dedup
// on the event id). A *new* slot would start at its creation and miss every event
// committed between the connector's last confirmation and then: the cut-over never
// creates a slot (create_slot is forced off).
//
// Every refusal is kFailedPrecondition whose message says what is wrong and the fix.
#pragma once

#include <string>
#include <vector>

#include "base/lsn.h"
#include "base/status.h"
#include "slot/slot_admin.h"
#include "src/relay/core/config.h"

namespace walrelay::relay {

struct TakeoverPlan {
  slot::SlotInfo slot;       // the slot as read (inactive, valid, same database and plugin)
  Lsn start;                 // its confirmed_flush_lsn: streaming starts after it
  uint64_t pending_wal_bytes = 0;  // WAL written since: what is left to read
  bool publication_all_tables = false;  // FOR ALL TABLES (Debezium's default autocreate)
  // One line per check that passed, in order, for the operator (and --dry-run).
  std::vector<std::string> checks;
};

// Reads, changes nothing. Checks, in order: the server's wal_level; the slot exists in
// this database, is logical, of config.plugin, not temporary, not active (the connector
// is stopped) and not invalidated; the publication exists and publishes every configured
// table (through the root when partitioned); each table has the columns the mapping needs
// (event_id, aggregate_id, event_type, payload under their configured names, and any
// optional column that is configured), and its payload is of a type walrelay publishes
// (jsonb, json, text, varchar, bytea).
Result<TakeoverPlan> PlanTakeover(const RelayConfig& config);

}  // namespace walrelay::relay
