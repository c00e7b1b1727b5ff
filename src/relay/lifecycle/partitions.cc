#include "src/relay/lifecycle/partitions.h"

#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <ctime>

#include "base/sql.h"

namespace walrelay::relay {
namespace {

std::string Utc(time_t t, const char* format) {
  std::tm u{};
  gmtime_r(&t, &u);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &u);
  return buf;
}

std::string Value(const PGresult* r, int row, int col) {
  return std::string(PQgetvalue(r, row, col), PQgetlength(r, row, col));
}

Result<slot::PgResultPtr> Exec(PGconn* conn, const std::string& sql,
                               const std::vector<const char*>& params, const std::string& what) {
  return slot::ExecPg(conn, sql, params, "outbox janitor: " + what);
}

// A partition of the table as the catalog has it.
struct Partition {
  std::string name;  // schema-qualified, quoted where needed (regclass text)
  bool detach_pending = false;
  bool bounded = false;  // a FROM ... TO range of timestamps (not DEFAULT, not MAXVALUE)
  std::string from, to;  // the bounds' literals as the server deparses them
  int64_t from_epoch = 0, to_epoch = 0;
  bool expired = false;  // to <= now() - retention
};

Result<std::vector<Partition>> ListPartitions(PGconn* conn, const std::string& table,
                                              const std::string& retention) {
  // pg_get_expr gives "FOR VALUES FROM ('<lo>') TO ('<hi>')" for a range of literals.
  static const std::string kSql =
      "WITH p AS (SELECT c.oid, i.inhdetachpending AS pending, "
      "regexp_match(pg_get_expr(c.relpartbound, c.oid), "
      "'^FOR VALUES FROM \\(''([^'']+)''\\) TO \\(''([^'']+)''\\)$') AS b "
      "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = "
      "$1::regclass) "
      "SELECT oid::regclass::text, pending, b IS NOT NULL, b[1], b[2], "
      "extract(epoch FROM b[1]::timestamptz)::bigint, "
      "extract(epoch FROM b[2]::timestamptz)::bigint, "
      "coalesce(b[2]::timestamptz <= now() - $2::interval, false) FROM p ORDER BY b[1]";
  const std::string quoted = QuoteQualifiedName(table);
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgResultPtr r,
      Exec(conn, kSql, {quoted.c_str(), retention.c_str()}, "listing the partitions of " + table));
  std::vector<Partition> out;
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    Partition p;
    p.name = Value(r.get(), i, 0);
    p.detach_pending = Value(r.get(), i, 1) == "t";
    p.bounded = Value(r.get(), i, 2) == "t";
    if (p.bounded) {
      p.from = Value(r.get(), i, 3);
      p.to = Value(r.get(), i, 4);
      p.from_epoch = std::strtoll(PQgetvalue(r.get(), i, 5), nullptr, 10);
      p.to_epoch = std::strtoll(PQgetvalue(r.get(), i, 6), nullptr, 10);
      p.expired = Value(r.get(), i, 7) == "t";
    }
    out.push_back(std::move(p));
  }
  return out;
}

Result<uint64_t> CountUndelivered(PGconn* conn, const std::string& partition,
                                  const std::string& undelivered) {
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgResultPtr r,
      Exec(conn, "SELECT count(*) FROM " + partition + " WHERE " + undelivered, {},
           "counting the undelivered rows of " + partition));
  return std::strtoull(PQgetvalue(r.get(), 0, 0), nullptr, 10);
}

// The detached `p`: dropped when every row is delivered, else attached again with its bounds.
Status DropOrReattach(PGconn* conn, const std::string& table, const Partition& p,
                      const std::string& undelivered, PartitionRound* round) {
  WALRELAY_ASSIGN_OR_RETURN(uint64_t left, CountUndelivered(conn, p.name, undelivered));
  if (left > 0) {
    spdlog::warn("outbox janitor: {} undelivered rows reached partition {} while it was being "
                 "detached (written with an old created_at): attaching it again",
                 left, p.name);
    ++round->kept_undelivered;
    return Exec(conn,
                "ALTER TABLE " + QuoteQualifiedName(table) + " ATTACH PARTITION " + p.name +
                    " FOR VALUES FROM (" + QuoteLiteral(p.from) + ") TO (" + QuoteLiteral(p.to) +
                    ")",
                {}, "attaching " + p.name + " again")
        .status();
  }
  WALRELAY_RETURN_IF_ERROR(
      Exec(conn, "DROP TABLE " + p.name, {}, "dropping partition " + p.name).status());
  ++round->dropped;
  spdlog::info("outbox janitor: dropped partition {} of {} ({} to {}): older than the "
               "retention, every row delivered",
               p.name, table, p.from, p.to);
  return Status::Ok();
}

}  // namespace

int PartitionsAhead(PartitionPeriod period) {
  return period == PartitionPeriod::kDaily ? 7 : 48;
}

std::vector<PartitionRange> PartitionRanges(const std::string& table, PartitionPeriod period,
                                            std::chrono::system_clock::time_point at, int count) {
  auto name = ParseQualifiedName(table);
  const std::string schema = name.ok() && !name->schema.empty() ? name->schema : "public";
  const std::string relname = name.ok() ? name->name : table;
  const bool daily = period == PartitionPeriod::kDaily;
  const int64_t step = daily ? 86400 : 3600;
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(at.time_since_epoch()).count();
  const int64_t start = now - ((now % step) + step) % step;
  std::vector<PartitionRange> out;
  for (int i = 0; i < count; ++i) {
    const time_t lo = static_cast<time_t>(start + i * step), hi = lo + step;
    PartitionRange r;
    r.name = QuoteIdentifier(schema) + "." +
             QuoteIdentifier(relname + "_p" + Utc(lo, daily ? "%Y%m%d" : "%Y%m%d%H"));
    r.from = Utc(lo, "%Y-%m-%d %H:%M:%S+00");
    r.from_epoch = lo;
    r.to_epoch = hi;
    r.to = Utc(hi, "%Y-%m-%d %H:%M:%S+00");
    out.push_back(std::move(r));
  }
  return out;
}

std::string CreatePartitionSql(const std::string& table, const PartitionRange& range) {
  return "CREATE TABLE IF NOT EXISTS " + range.name + " PARTITION OF " +
         QuoteQualifiedName(table) + " FOR VALUES FROM (" + QuoteLiteral(range.from) + ") TO (" +
         QuoteLiteral(range.to) + ")";
}

Result<PartitionRound> MaintainPartitions(PGconn* conn, const std::string& table,
                                          PartitionPeriod period,
                                          std::chrono::milliseconds retention,
                                          const std::string& undelivered) {
  PartitionRound round;
  const std::string quoted = QuoteQualifiedName(table);
  {
    WALRELAY_ASSIGN_OR_RETURN(
        slot::PgResultPtr r,
        Exec(conn,
             "SELECT current_setting('server_version_num')::int >= 140000, c.relkind = 'p', "
             "n.nspname || '.' || c.relname, (SELECT quote_ident(en.nspname) FROM pg_extension "
             "e JOIN pg_namespace en ON en.oid = e.extnamespace WHERE e.extname = 'pg_partman') "
             "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = "
             "$1::regclass",
             {quoted.c_str()}, "reading " + table));
    if (Value(r.get(), 0, 0) != "t") {
      return FailedPreconditionError(
          "outbox.cleanup partitions needs PostgreSQL 14 or later (DETACH PARTITION ... "
          "CONCURRENTLY); use outbox.cleanup janitor");
    }
    if (Value(r.get(), 0, 1) != "t") {
      return FailedPreconditionError(
          "outbox.cleanup partitions: " + table +
          " is not a partitioned table, so there is no partition to drop. Create it with "
          "`walrelay setup` and outbox.cleanup partitions (on a new database), "
          "or move to it as docs/operations.md section 4 shows; or use outbox.cleanup janitor");
    }
    if (!PQgetisnull(r.get(), 0, 3)) {  // pg_partman is installed: does it manage the table?
      const std::string plain = Value(r.get(), 0, 2);
      WALRELAY_ASSIGN_OR_RETURN(
          slot::PgResultPtr m,
          Exec(conn,
               "SELECT count(*) FROM " + Value(r.get(), 0, 3) +
                   ".part_config WHERE parent_table = $1",
               {plain.c_str()}, "reading pg_partman's part_config"));
      if (Value(m.get(), 0, 0) != "0") {
        round.managed_by_partman = true;
        return round;
      }
    }
  }
  const std::string interval = std::to_string(retention.count()) + " milliseconds";
  WALRELAY_ASSIGN_OR_RETURN(std::vector<Partition> partitions,
                            ListPartitions(conn, table, interval));

  // 1. The current period and the next ones, where no partition covers them yet.
  for (const PartitionRange& want : PartitionRanges(table, period, std::chrono::system_clock::now(),
                                                    PartitionsAhead(period))) {
    bool covered = false;  // by any partition, whatever its name
    for (const Partition& p : partitions) {
      covered = covered ||
                (p.bounded && p.from_epoch <= want.from_epoch && want.from_epoch < p.to_epoch);
    }
    if (covered) continue;
    Status created = Exec(conn, CreatePartitionSql(table, want), {}, "creating " + want.name).status();
    if (!created.ok()) return created;
    ++round.created;
  }

  // 2 and 3. Pending detaches first, then expired partitions whose rows are all delivered.
  // `how`: FINALIZE (a detach an earlier round left pending) or CONCURRENTLY.
  auto detach_then_drop = [&](const Partition& p, const char* how, const char* what) {
    WALRELAY_RETURN_IF_ERROR(
        Exec(conn, "ALTER TABLE " + quoted + " DETACH PARTITION " + p.name + " " + how, {},
             what + p.name)
            .status());
    return DropOrReattach(conn, table, p, undelivered, &round);
  };
  for (const Partition& p : partitions) {
    if (p.detach_pending) {
      WALRELAY_RETURN_IF_ERROR(detach_then_drop(p, "FINALIZE", "finishing the detach of "));
      continue;
    }
    if (!p.bounded || !p.expired) continue;
    WALRELAY_ASSIGN_OR_RETURN(uint64_t n, CountUndelivered(conn, p.name, undelivered));
    if (n > 0) {
      ++round.kept_undelivered;
      continue;
    }
    WALRELAY_RETURN_IF_ERROR(detach_then_drop(p, "CONCURRENTLY", "detaching "));
  }
  return round;
}

}  // namespace walrelay::relay
