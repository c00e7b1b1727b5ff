#include "src/relay/lifecycle/table_health.h"

#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include "base/sql.h"
#include "src/relay/core/metric_names.h"

namespace walrelay::relay {

Result<std::vector<TableHealthRow>> ReadTableHealth(PGconn* conn,
                                                    const std::vector<HealthTable>& tables) {
  std::vector<TableHealthRow> out;
  for (const HealthTable& spec : tables) {
    const std::string& table = spec.name;
    WALRELAY_ASSIGN_OR_RETURN(
        slot::PgResultPtr r,
        slot::ExecPg(conn,
                     // A partitioned table has no rows of its own: its leaves are summed.
                     // (pg_partition_tree lists nothing for a plain table: it is its own
                     // tree.)
                     "WITH t AS (SELECT oid, relkind FROM pg_class WHERE oid = to_regclass($1)), "
                     "tree AS (SELECT p.relid, p.isleaf FROM t, pg_partition_tree(t.oid) p "
                     "UNION SELECT t.oid, true FROM t WHERE t.relkind <> 'p'), "
                     "leaf AS (SELECT s.*, EXTRACT(epoch FROM now() - greatest(s.last_vacuum, "
                     "s.last_autovacuum)) AS since_vacuum, EXTRACT(epoch FROM now() - "
                     "greatest(s.last_analyze, s.last_autoanalyze)) AS since_analyze FROM tree "
                     "LEFT JOIN pg_stat_user_tables s ON s.relid = tree.relid WHERE tree.isleaf) "
                     "SELECT t.oid::regclass::text, (SELECT coalesce(sum(n_live_tup), 0) FROM "
                     "leaf), (SELECT coalesce(sum(n_dead_tup), 0) FROM leaf), "
                     // the leaf whose dead rows wait longest, else the latest vacuum anywhere
                     "coalesce((SELECT max(since_vacuum) FROM leaf WHERE n_dead_tup > 0), "
                     "(SELECT min(since_vacuum) FROM leaf)), "
                     "(SELECT min(since_analyze) FROM leaf), "
                     "(SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM tree), "
                     "(SELECT count(*) FROM tree JOIN pg_index i ON i.indrelid = tree.relid "
                     "WHERE NOT i.indisvalid), "
                     "(SELECT count(*) FROM pg_inherits WHERE inhparent = t.oid), "
                     // the oldest partition's lower bound, when it is a date or timestamp
                     "(SELECT EXTRACT(epoch FROM now() - min((regexp_match(pg_get_expr("
                     "c.relpartbound, c.oid), '^FOR VALUES FROM \\(''(\\d{4}-\\d\\d-"
                     "\\d\\d[^'']*)''\\)'))[1]::timestamptz)) FROM pg_inherits i JOIN "
                     "pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = t.oid), "
                     // an index that leads with the timestamp column makes min() cheap
                     "EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = "
                     "i.indrelid AND a.attnum = i.indkey[0] WHERE i.indrelid = t.oid AND "
                     "a.attname = $2) FROM t",
                     {table.c_str(), spec.timestamp_column.c_str()}, "table health of " + table));
    if (PQntuples(r.get()) != 1) continue;  // not there (yet): nothing to show
    const PGresult* res = r.get();
    auto num = [&](int col) -> std::optional<double> {
      if (PQgetisnull(res, 0, col)) return std::nullopt;
      return std::strtod(PQgetvalue(res, 0, col), nullptr);
    };
    TableHealthRow row;
    row.table = PQgetvalue(res, 0, 0);
    row.live_rows = static_cast<int64_t>(num(1).value_or(0));
    row.dead_rows = static_cast<int64_t>(num(2).value_or(0));
    row.seconds_since_vacuum = num(3);
    row.seconds_since_analyze = num(4);
    row.total_bytes = static_cast<int64_t>(num(5).value_or(0));
    row.invalid_indexes = static_cast<int64_t>(num(6).value_or(0));
    row.partitions = static_cast<int64_t>(num(7).value_or(0));
    row.seconds_since_oldest_partition = num(8);
    if (!spec.timestamp_column.empty()) {
      if (std::string_view(PQgetvalue(res, 0, 9)) == "t") {
        WALRELAY_ASSIGN_OR_RETURN(
            slot::PgResultPtr oldest,
            slot::ExecPg(conn,
                         "SELECT EXTRACT(epoch FROM now() - min(" +
                             QuoteIdentifier(spec.timestamp_column) + ")) FROM " +
                             QuoteQualifiedName(table),
                         {}, "the oldest row of " + table));
        if (!PQgetisnull(oldest.get(), 0, 0)) {
          row.oldest_row_seconds = std::strtod(PQgetvalue(oldest.get(), 0, 0), nullptr);
        }
      } else {
        row.oldest_row_unindexed = true;
      }
    }
    out.push_back(std::move(row));
  }
  return out;
}

void SetTableHealthGauges(const TableHealthRow& row, metrics::Registry& registry) {
  namespace mn = metric_names;
  const metrics::Labels l = {{"table", row.table}};
  auto set = [&](const mn::MetricName& m, double v) { registry.AddGauge(m.name, m.help, l).Set(v); };
  set(mn::kTableLiveRows, static_cast<double>(row.live_rows));
  set(mn::kTableDeadRows, static_cast<double>(row.dead_rows));
  set(mn::kTableSecondsSinceVacuum, row.seconds_since_vacuum.value_or(-1));
  set(mn::kTableSecondsSinceAnalyze, row.seconds_since_analyze.value_or(-1));
  set(mn::kTableSizeBytes, static_cast<double>(row.total_bytes));
  set(mn::kTableInvalidIndexes, static_cast<double>(row.invalid_indexes));
  set(mn::kTablePartitions, static_cast<double>(row.partitions));
  set(mn::kTableOldestPartitionAge, row.seconds_since_oldest_partition.value_or(-1));
  set(mn::kTableOldestRowAge, row.oldest_row_seconds.value_or(-1));
}

Status TableHealthMonitor::Poll() {
  auto fail = [&](Status st) {
    if (!failing_) {
      spdlog::warn("table health: {} (keeping the last values, retrying)", st.ToString());
    }
    failing_ = true;
    conn_.reset();
    return st;
  };
  if (!conn_) {
    auto c = slot::ConnectPg(conninfo_, nullptr, "table health", slot::kRelaySession);
    if (!c.ok()) return fail(c.status());
    conn_ = std::move(*c);
  }
  auto rows = ReadTableHealth(conn_.get(), tables_);
  if (!rows.ok()) return fail(rows.status());
  failing_ = false;
  for (const TableHealthRow& row : *rows) {
    if (row.oldest_row_unindexed && unindexed_said_.insert(row.table).second) {
      spdlog::info("table health: no index of {} leads with its timestamp column, so the age "
                   "of its oldest row is not measured (min() would read the whole table at "
                   "every poll): create one (docs/operations.md section 3) to see it",
                   row.table);
    }
  }
  if (registry_ == nullptr) return Status::Ok();
  for (const TableHealthRow& row : *rows) SetTableHealthGauges(row, *registry_);
  return Status::Ok();
}

}  // namespace walrelay::relay
