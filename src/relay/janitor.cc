#include "src/relay/janitor.h"

#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include "base/sql.h"
#include "slot/pg_error.h"
#include "src/relay/progress.h"

namespace walrelay::relay {

std::string OutboxJanitor::BatchSql(const std::string& table) const {
  const std::string t = QuoteQualifiedName(table);
  const std::string older = QuoteIdentifier(options_.created_at_column) + " < now() - $1::interval";
  if (options_.poll_mode) {
    // Poll mode: a row is delivered once the poller marked it (poller.h).
    return "WITH doomed AS (SELECT ctid FROM " + t + " WHERE " + older +
           " AND published_at IS NOT NULL LIMIT " + std::to_string(options_.batch_rows) +
           " FOR UPDATE SKIP LOCKED) DELETE FROM " + t + " WHERE ctid IN (SELECT ctid FROM doomed)";
  }
  return "WITH doomed AS (SELECT ctid FROM " + t + " WHERE " + older + " AND " +
         DeliveredBeforeBoundPredicate(options_.progress_table, options_.slot) + " LIMIT " +
         std::to_string(options_.batch_rows) + " FOR UPDATE SKIP LOCKED) DELETE FROM " + t +
         " WHERE ctid IN (SELECT ctid FROM doomed)";
}

Result<uint64_t> OutboxJanitor::RunOnce() {
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgConnPtr conn,
      slot::ConnectPg(options_.conninfo, nullptr, "outbox janitor", slot::kRelaySession));
  const std::string retention = std::to_string(options_.retention.count()) + " milliseconds";
  const auto pause = std::chrono::milliseconds(1000 / std::max(1, options_.batches_per_second));
  uint64_t total = 0;
  for (const std::string& table : options_.tables) {
    while (true) {
      const auto started = std::chrono::steady_clock::now();
      WALRELAY_ASSIGN_OR_RETURN(
          slot::PgResultPtr r,
          slot::ExecPg(conn.get(), BatchSql(table), {retention.c_str()},
                       "outbox janitor: deleting delivered rows of " + table));
      const uint64_t n = std::strtoull(PQcmdTuples(r.get()), nullptr, 10);
      total += n;
      deleted_.fetch_add(n, std::memory_order_relaxed);
      if (n < static_cast<uint64_t>(options_.batch_rows)) break;
      if (!periodic_.SleepUntil(started + pause)) return total;  // the rate bound; stopped
    }
  }
  return total;
}

void OutboxJanitor::Start() {
  if (options_.retention.count() <= 0) return;
  periodic_.Start(options_.interval, [this] { Round(); });
}

void OutboxJanitor::Stop() { periodic_.Stop(); }

void OutboxJanitor::Round() {
  Result<uint64_t> n = RunOnce();
  if (!n.ok()) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("outbox janitor: {} (nothing is lost: rows stay until a later round)",
                 n.status().ToString());
  } else if (*n > 0) {
    spdlog::debug("outbox janitor: deleted {} delivered rows older than {} ms", *n,
                  options_.retention.count());
  }
}

}  // namespace walrelay::relay
