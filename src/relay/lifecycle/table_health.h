// TableHealth: what the outbox and dead-letter tables look like to PostgreSQL, exported as
// metrics for the dashboard and the alerts (issue 14): live and dead tuples
// (pg_stat_user_tables), seconds since the last (auto)vacuum and (auto)analyze, total size
// with indexes and TOAST, invalid indexes (a failed CREATE INDEX CONCURRENTLY leaves one
// that every write still maintains) and the number of partitions. A partitioned table
// (outbox.cleanup partitions) reports the sum over its leaf partitions; its seconds since
// vacuum are those of the leaf whose dead rows wait longest. Polled on its own connection and thread every
// `interval` (the slot guard's); a failed poll is logged once per failure streak and the
// previous values stay. Gauges carry the label table=<schema.table>.
//
// Ages: of the oldest partition (its lower bound, when the partitions are ranges of dates
// or timestamps) and of the oldest row by the table's timestamp column (the outbox's
// created_at; the relay names none for the dead-letter table, which has no index on
// dead_at), read only when an index leads with that column (else min() reads the whole
// table at every poll; said once in the log, -1 in the gauge).
//
// Not yet: the age of the oldest row not yet confirmed (rows after the recorded bound; no
// index finds them without reading the delivered ones first); the relay's heartbeat lag
// and commit-to-ack latency bound freshness instead. The inbox tables: `walrelay lag
// --tables`.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "slot/pg_error.h"
#include "src/metrics/registry.h"
#include "src/relay/lifecycle/periodic.h"

namespace walrelay::relay {

// A table to watch: its name (SQL text, base/sql.h) and the timestamp column its oldest
// row is found by ("" = none).
struct HealthTable {
  HealthTable(std::string n, std::string column = "")  // NOLINT: a name alone converts
      : name(std::move(n)), timestamp_column(std::move(column)) {}
  HealthTable(const char* n) : HealthTable(std::string(n)) {}  // NOLINT
  std::string name;
  std::string timestamp_column;
};

struct TableHealthRow {
  std::string table;  // as the server names it (regclass text)
  int64_t live_rows = 0, dead_rows = 0;
  std::optional<double> seconds_since_vacuum, seconds_since_analyze;  // nullopt: never
  int64_t total_bytes = 0;
  int64_t invalid_indexes = 0;
  int64_t partitions = 0;  // 0: not partitioned
  std::optional<double> seconds_since_oldest_partition;  // its lower bound; nullopt: none
  std::optional<double> oldest_row_seconds;  // nullopt: empty, no column, or not indexed
  bool oldest_row_unindexed = false;         // a timestamp column without a leading index
};

// One row per table of `tables` that exists.
Result<std::vector<TableHealthRow>> ReadTableHealth(PGconn* conn,
                                                    const std::vector<HealthTable>& tables);

// Sets the walrelay_table_* gauges of `row` (label table=<row.table>) in `registry`.
void SetTableHealthGauges(const TableHealthRow& row, metrics::Registry& registry);

class TableHealthMonitor {
 public:
  TableHealthMonitor(slot::ConnInfo conninfo, std::vector<HealthTable> tables,
                     std::chrono::milliseconds interval, metrics::Registry* registry)
      : conninfo_(std::move(conninfo)), tables_(std::move(tables)), interval_(interval),
        registry_(registry) {}
  ~TableHealthMonitor() { Stop(); }
  void Start() {
    periodic_.Start(interval_, [this] { Poll().IgnoreError(); });
  }
  void Stop() { periodic_.Stop(); }
  // One poll: reads and sets the gauges. (The thread calls it; exposed for tests.)
  Status Poll();

 private:
  const slot::ConnInfo conninfo_;
  const std::vector<HealthTable> tables_;
  const std::chrono::milliseconds interval_;
  metrics::Registry* const registry_;
  slot::PgConnPtr conn_;
  bool failing_ = false;
  std::set<std::string> unindexed_said_;  // tables whose missing index was logged
  PeriodicThread periodic_;
};

}  // namespace walrelay::relay
