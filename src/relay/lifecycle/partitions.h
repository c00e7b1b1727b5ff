// Time partitions of the outbox (issue 14, cleanup design "partitions"; docs/operations.md
// section 4): `walrelay setup` with outbox.cleanup partitions creates the outbox as a table
// range-partitioned on created_at (PartitionedOutboxTableDdl, core/schema.h) and its first
// partitions; the janitor (janitor.h) then, every round, for every outbox table:
//
//   1. creates the partitions of the current period and the next ones (7 days, or 48
//      hours), so a write never finds no partition for now(); the table has no DEFAULT
//      partition (it would forbid DETACH ... CONCURRENTLY and catch rows that no period
//      could ever drop);
//   2. finishes a detach an earlier round left pending (DETACH ... FINALIZE: the wait for
//      older snapshots was interrupted);
//   3. drops each partition whose whole range is older than the retention (its upper
//      bound <= now() - retention) once every row in it is delivered — the janitor's row
//      rule (janitor.h: inserted before the recorded bound; poll mode: published_at set),
//      checked before the detach and again after it, on the detached table, which no
//      write can reach any more (a row written with an old created_at in between puts the
//      partition back: ATTACH with the same bounds). DETACH ... CONCURRENTLY blocks no
//      writer; DROP of the detached table is instant and leaves no dead tuples.
//
// So no partition older than the retention plus one period stays, unless rows in it are
// not delivered (the relay is behind, or the broker down): then it waits, as rows do with
// the row janitor. Partitions are named <table>_pYYYYMMDD (daily) or <table>_pYYYYMMDDHH
// (hourly), UTC, in the table's schema; a partition of another name is dropped by the same
// rule (its bounds are read from the catalog), a DEFAULT one never.
//
// pg_partman: when its part_config lists the table, the janitor leaves the table to it and
// says so once. PostgreSQL 14 or later (DETACH ... CONCURRENTLY).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "slot/pg_error.h"
#include "src/relay/core/config.h"

namespace walrelay::relay {

struct PartitionRange {
  std::string name;  // qualified and quoted, e.g. "public"."outbox_p20261204"
  std::string from;  // the bounds as timestamptz literals (UTC), e.g. 2026-12-04 00:00:00+00
  std::string to;
  int64_t from_epoch = 0, to_epoch = 0;  // the same bounds in Unix seconds
};

// The partitions of `table` (schema-qualified, as configured) covering the `count` periods
// from the one that holds `at`.
std::vector<PartitionRange> PartitionRanges(const std::string& table, PartitionPeriod period,
                                            std::chrono::system_clock::time_point at, int count);

// CREATE TABLE IF NOT EXISTS <range.name> PARTITION OF <table> FOR VALUES FROM ... TO ...
std::string CreatePartitionSql(const std::string& table, const PartitionRange& range);

// How many periods ahead (the current one included) the janitor keeps created.
int PartitionsAhead(PartitionPeriod period);

struct PartitionRound {
  uint64_t created = 0;
  uint64_t dropped = 0;
  uint64_t kept_undelivered = 0;  // expired partitions kept: rows in them not yet delivered
  bool managed_by_partman = false;
};

// One round of steps 1-3 on `table` over `conn` (autocommit; DETACH ... CONCURRENTLY
// cannot run in a transaction block). `undelivered` is the SQL predicate that is true for
// a row not yet delivered. kFailedPrecondition when the table is not partitioned or the
// server is older than 14.
Result<PartitionRound> MaintainPartitions(PGconn* conn, const std::string& table,
                                          PartitionPeriod period,
                                          std::chrono::milliseconds retention,
                                          const std::string& undelivered);

}  // namespace walrelay::relay
