#include "src/relay/lifecycle/janitor.h"

#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include "base/sql.h"
#include "slot/pg_error.h"
#include "src/relay/lifecycle/partitions.h"
#include "src/relay/core/progress.h"

namespace walrelay::relay {

std::string OutboxJanitor::BatchSql(const std::string& table) const {
  const std::string t = QuoteQualifiedName(table);
  const std::string older = QuoteIdentifier(options_.created_at_column) + " < now() - $1::interval";
  // Poll mode: a row is delivered once the poller marked it (polling/poller.h).
  const std::string delivered =
      options_.poll_mode ? std::string("published_at IS NOT NULL")
                         : DeliveredBeforeBoundPredicate(options_.progress_table, options_.slot);
  // Rows are named by (tableoid, ctid): a ctid alone names a row in every partition of a
  // partitioned outbox (invariant 10).
  return "WITH doomed AS (SELECT tableoid, ctid FROM " + t + " WHERE " + older + " AND " +
         delivered + " LIMIT " + std::to_string(options_.batch_rows) +
         " FOR UPDATE SKIP LOCKED) DELETE FROM " + t +
         " WHERE (tableoid, ctid) IN (SELECT tableoid, ctid FROM doomed)";
}

std::string OutboxJanitor::UndeliveredPredicate() const {
  if (options_.poll_mode) return "published_at IS NULL";
  // NULL (no bound recorded yet) counts as undelivered.
  return "(" + DeliveredBeforeBoundPredicate(options_.progress_table, options_.slot) +
         ") IS NOT TRUE";
}

Result<uint64_t> OutboxJanitor::DropPartitions(PGconn* conn) {
  uint64_t dropped = 0;
  for (const std::string& table : options_.tables) {
    WALRELAY_ASSIGN_OR_RETURN(
        PartitionRound round, MaintainPartitions(conn, table, options_.period, options_.retention,
                                                 UndeliveredPredicate()));
    if (round.managed_by_partman) {
      if (!partman_said_) {
        spdlog::warn("outbox janitor: pg_partman manages {} (its part_config lists it): the "
                     "janitor leaves its partitions alone; set pg_partman's retention above "
                     "the time the relay may lag, or it drops undelivered rows that lost-slot "
                     "recovery would need",
                     table);
        partman_said_ = true;
      }
      continue;
    }
    if (round.created > 0) {
      spdlog::info("outbox janitor: created {} partitions of {} ahead", round.created, table);
    }
    if (round.kept_undelivered > 0) {
      spdlog::debug("outbox janitor: {} partitions of {} older than the retention wait for "
                    "their rows to be delivered",
                    round.kept_undelivered, table);
    }
    dropped += round.dropped;
    dropped_partitions_.fetch_add(round.dropped, std::memory_order_relaxed);
  }
  return dropped;
}

Result<uint64_t> OutboxJanitor::RunOnce() {
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgConnPtr conn,
      slot::ConnectPg(options_.conninfo, nullptr, "outbox janitor", slot::kRelaySession));
  if (options_.cleanup == OutboxCleanup::kPartitions) return DropPartitions(conn.get());
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
    spdlog::warn("outbox janitor: {} ({})", n.status().ToString(),
                 options_.cleanup == OutboxCleanup::kPartitions
                     ? "nothing is lost: partitions stay until a later round; but while "
                       "partitions ahead cannot be created, a write past the last one fails"
                     : "nothing is lost: rows stay until a later round");
  } else if (*n > 0) {
    spdlog::debug("outbox janitor: deleted {} delivered rows older than {} ms", *n,
                  options_.retention.count());
  }
}

}  // namespace walrelay::relay
