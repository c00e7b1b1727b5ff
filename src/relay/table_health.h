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
// Not yet: partition ages, the age of the oldest row and of the oldest
// unconfirmed row (a min(created_at) needs an index to be cheap), the inbox tables.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "slot/pg_error.h"
#include "src/metrics/registry.h"
#include "src/relay/periodic.h"

namespace walrelay::relay {

struct TableHealthRow {
  std::string table;  // as the server names it (regclass text)
  int64_t live_rows = 0, dead_rows = 0;
  std::optional<double> seconds_since_vacuum, seconds_since_analyze;  // nullopt: never
  int64_t total_bytes = 0;
  int64_t invalid_indexes = 0;
  int64_t partitions = 0;  // 0: not partitioned
};

// One row per table of `tables` that exists (names as SQL text, base/sql.h).
Result<std::vector<TableHealthRow>> ReadTableHealth(PGconn* conn,
                                                    const std::vector<std::string>& tables);

// Sets the walrelay_table_* gauges of `row` (label table=<row.table>) in `registry`.
void SetTableHealthGauges(const TableHealthRow& row, metrics::Registry& registry);

class TableHealthMonitor {
 public:
  TableHealthMonitor(std::string conninfo, std::vector<std::string> tables,
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
  const std::string conninfo_;
  const std::vector<std::string> tables_;
  const std::chrono::milliseconds interval_;
  metrics::Registry* const registry_;
  slot::PgConnPtr conn_;
  bool failing_ = false;
  PeriodicThread periodic_;
};

}  // namespace walrelay::relay
