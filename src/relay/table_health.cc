#include "src/relay/table_health.h"

#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include "src/relay/metric_names.h"

namespace walrelay::relay {

Result<std::vector<TableHealthRow>> ReadTableHealth(PGconn* conn,
                                                    const std::vector<std::string>& tables) {
  std::vector<TableHealthRow> out;
  for (const std::string& table : tables) {
    WALRELAY_ASSIGN_OR_RETURN(
        slot::PgResultPtr r,
        slot::ExecPg(conn,
                     "SELECT c.oid::regclass::text, coalesce(s.n_live_tup, 0), "
                     "coalesce(s.n_dead_tup, 0), "
                     "extract(epoch FROM now() - greatest(s.last_vacuum, s.last_autovacuum)), "
                     "extract(epoch FROM now() - greatest(s.last_analyze, s.last_autoanalyze)), "
                     "pg_total_relation_size(c.oid), "
                     "(SELECT count(*) FROM pg_index i WHERE i.indrelid = c.oid AND NOT "
                     "i.indisvalid) "
                     "FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
                     "WHERE c.oid = to_regclass($1)",
                     {table.c_str()}, "table health of " + table));
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
    out.push_back(std::move(row));
  }
  return out;
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
  if (registry_ == nullptr) return Status::Ok();
  namespace mn = metric_names;
  for (const TableHealthRow& row : *rows) {
    const metrics::Labels l = {{"table", row.table}};
    auto set = [&](const mn::MetricName& m, double v) {
      registry_->AddGauge(m.name, m.help, l).Set(v);
    };
    set(mn::kTableLiveRows, static_cast<double>(row.live_rows));
    set(mn::kTableDeadRows, static_cast<double>(row.dead_rows));
    set(mn::kTableSecondsSinceVacuum, row.seconds_since_vacuum.value_or(-1));
    set(mn::kTableSecondsSinceAnalyze, row.seconds_since_analyze.value_or(-1));
    set(mn::kTableSizeBytes, static_cast<double>(row.total_bytes));
    set(mn::kTableInvalidIndexes, static_cast<double>(row.invalid_indexes));
  }
  return Status::Ok();
}

}  // namespace walrelay::relay
