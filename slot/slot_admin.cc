#include "slot/slot_admin.h"

#include <cerrno>
#include <cstdlib>

#include "base/sql.h"
#include "slot/server_version.h"

namespace walrelay::slot {

std::vector<std::string> ServerSettings::StandbySlots() const {
  std::vector<std::string> names(1);
  for (const char c : synchronized_standby_slots) {
    if (c == ',') {
      names.emplace_back();
    } else if (c != ' ' && c != '"' && c != '\t') {
      names.back() += c;
    }
  }
  std::erase(names, std::string());
  return names;
}

namespace {

std::string Value(const PGresult* r, int row, int col) {
  if (PQgetisnull(r, row, col)) return {};
  return std::string(PQgetvalue(r, row, col), PQgetlength(r, row, col));
}

std::optional<Lsn> OptLsn(const PGresult* r, int row, int col) {
  if (PQgetisnull(r, row, col)) return std::nullopt;
  return Lsn::Parse(Value(r, row, col));
}

Result<int64_t> ParseInt(std::string_view what, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0') {
    return InternalError("cannot parse " + std::string(what) + " '" + text + "'");
  }
  return static_cast<int64_t>(v);
}

// pg_settings unit of a memory setting ("kB", "8kB", "MB", "16MB", "GB") in bytes.
Result<int64_t> UnitBytes(const std::string& unit) {
  size_t i = 0;
  while (i < unit.size() && unit[i] >= '0' && unit[i] <= '9') ++i;
  const int64_t factor = i == 0 ? 1 : std::strtoll(unit.substr(0, i).c_str(), nullptr, 10);
  const std::string base = unit.substr(i);
  if (base == "B" || base.empty()) return factor;
  if (base == "kB") return factor * 1024;
  if (base == "MB") return factor * 1024 * 1024;
  if (base == "GB") return factor * 1024 * 1024 * 1024;
  return InternalError("unknown memory unit '" + unit + "'");
}

}  // namespace

std::optional<uint64_t> SlotInfo::confirmed_lag_bytes() const {
  if (!confirmed_flush_lsn) return std::nullopt;
  return current_wal_lsn > *confirmed_flush_lsn ? current_wal_lsn.value - confirmed_flush_lsn->value
                                                : 0;
}

std::optional<uint64_t> SlotInfo::retained_wal_bytes() const {
  if (!restart_lsn) return std::nullopt;
  return current_wal_lsn > *restart_lsn ? current_wal_lsn.value - restart_lsn->value : 0;
}

std::string SlotInvalidation(std::string_view wal_status, std::optional<bool> conflicting,
                             std::string_view invalidation_reason) {
  if (!invalidation_reason.empty()) return std::string(invalidation_reason);
  if (conflicting.value_or(false)) return "conflicting";
  if (wal_status == "lost") return "wal_removed";
  return "";
}

std::string ExplainSlotInvalidation(std::string_view reason) {
  if (reason == "wal_removed") {
    return "wal_status 'lost': the server removed WAL the slot still needed "
           "(max_slot_wal_keep_size exceeded while it was not read)";
  }
  if (reason == "rows_removed" || reason == "conflicting") {
    return "invalidated by a conflict with recovery (" + std::string(reason) +
           "): the primary removed catalog rows the slot still needed (use a physical slot "
           "with hot_standby_feedback = on between primary and standby)";
  }
  if (reason == "wal_level_insufficient") {
    return "invalidated (wal_level_insufficient): wal_level on the primary was lowered below "
           "logical";
  }
  if (reason == "idle_timeout") {
    return "invalidated (idle_timeout): it was not read for longer than "
           "idle_replication_slot_timeout";
  }
  return "invalidated (invalidation_reason '" + std::string(reason) + "')";
}

Result<std::unique_ptr<SlotAdmin>> SlotAdmin::Connect(const ConnInfo& conninfo) {
  WALRELAY_ASSIGN_OR_RETURN(PgConnPtr conn,
                            ConnectPg(conninfo, "false", "admin connection", kRelaySession));
  return std::unique_ptr<SlotAdmin>(new SlotAdmin(std::move(conn)));
}

std::string SlotAdmin::user() const {
  const char* u = PQuser(conn_.get());
  return u ? u : "";
}

Result<PgResultPtr> SlotAdmin::Query(std::string_view what, const std::string& sql,
                                     const std::vector<std::string>& params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p.c_str());
  auto res = ExecPg(conn_.get(), sql, values, what);
  if (!res.ok() && PQstatus(conn_.get()) == CONNECTION_BAD) {
    PQreset(conn_.get());  // the next call gets a fresh connection
  }
  return res;
}

// The server's WAL position: pg_current_wal_lsn() on a primary; on a standby, where that
// function fails ("recovery is in progress"), the last replayed position, so that the slots
// of a standby (a synchronized failover slot, a slot decoding on the standby) can be read.
constexpr std::string_view kWalPositionSql =
    "CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END";

Result<std::vector<SlotInfo>> SlotAdmin::SelectSlots(const std::string& where,
                                                     const std::vector<std::string>& params) {
  // `conflicting` exists since PostgreSQL 16, `invalidation_reason`, `inactive_since`,
  // `failover` and `synced` since 17.
  const int version = PQserverVersion(conn_.get());
  const std::string sql =
      "SELECT slot_name, plugin, slot_type, database, temporary, active, active_pid, "
      "restart_lsn, confirmed_flush_lsn, wal_status, safe_wal_size, " +
      std::string(kWalPositionSql) + ", " +
      std::string(version >= kPgVersionSlotConflicting ? "conflicting, " : "NULL::boolean, ") +
      (SupportsFailoverSlots(version)
           ? "invalidation_reason, to_char(inactive_since AT TIME ZONE 'UTC', "
             "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), failover, synced, "
             "extract(epoch FROM now() - inactive_since)::bigint "
           : "NULL::text, NULL::text, false, false, NULL::bigint ") +
      "FROM pg_replication_slots " +
      where + " ORDER BY slot_name";
  WALRELAY_ASSIGN_OR_RETURN(PgResultPtr r, Query("reading pg_replication_slots", sql, params));
  std::vector<SlotInfo> slots;
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    SlotInfo s;
    s.slot_name = Value(r.get(), i, 0);
    s.plugin = Value(r.get(), i, 1);
    s.slot_type = Value(r.get(), i, 2);
    s.database = Value(r.get(), i, 3);
    s.temporary = Value(r.get(), i, 4) == "t";
    s.active = Value(r.get(), i, 5) == "t";
    if (!PQgetisnull(r.get(), i, 6)) {
      WALRELAY_ASSIGN_OR_RETURN(int64_t pid, ParseInt("active_pid", Value(r.get(), i, 6)));
      s.active_pid = static_cast<int>(pid);
    }
    s.restart_lsn = OptLsn(r.get(), i, 7);
    s.confirmed_flush_lsn = OptLsn(r.get(), i, 8);
    s.wal_status = Value(r.get(), i, 9);
    if (!PQgetisnull(r.get(), i, 10)) {
      WALRELAY_ASSIGN_OR_RETURN(s.safe_wal_size, ParseInt("safe_wal_size", Value(r.get(), i, 10)));
    }
    s.current_wal_lsn = OptLsn(r.get(), i, 11).value_or(Lsn());
    std::optional<bool> conflicting;
    if (!PQgetisnull(r.get(), i, 12)) conflicting = Value(r.get(), i, 12) == "t";
    s.invalidation_reason = SlotInvalidation(s.wal_status, conflicting, Value(r.get(), i, 13));
    s.inactive_since = Value(r.get(), i, 14);
    s.failover = Value(r.get(), i, 15) == "t";
    s.synced = Value(r.get(), i, 16) == "t";
    if (!PQgetisnull(r.get(), i, 17)) {
      WALRELAY_ASSIGN_OR_RETURN(s.inactive_seconds,
                                ParseInt("inactive seconds", Value(r.get(), i, 17)));
    }
    slots.push_back(std::move(s));
  }
  return slots;
}

Result<SlotInfo> SlotAdmin::GetSlot(std::string_view slot_name) {
  WALRELAY_ASSIGN_OR_RETURN(std::vector<SlotInfo> slots,
                            SelectSlots("WHERE slot_name = $1", {std::string(slot_name)}));
  if (slots.empty()) {
    return NotFoundError("replication slot \"" + std::string(slot_name) +
                         "\" does not exist; create it first or check the name");
  }
  return std::move(slots.front());
}

Result<std::vector<SlotInfo>> SlotAdmin::ListSlots() { return SelectSlots("", {}); }

Status SlotAdmin::DropSlot(std::string_view slot_name) {
  return Query("dropping replication slot " + std::string(slot_name),
               "SELECT pg_drop_replication_slot($1)", {std::string(slot_name)})
      .status();
}

namespace {
// The slot lock's advisory key: ('WALR', hashtext(slot name)), the two-int4 form, so it
// shares no key with an application's one-bigint advisory locks.
constexpr const char* kSlotLockKey = "1463897170, hashtext($1)";
}  // namespace

Result<bool> SlotAdmin::TryLockSlot(std::string_view slot_name) {
  WALRELAY_ASSIGN_OR_RETURN(
      PgResultPtr r, Query("taking the lock of replication slot " + std::string(slot_name),
                           std::string("SELECT pg_try_advisory_lock(") + kSlotLockKey + ")",
                           {std::string(slot_name)}));
  return Value(r.get(), 0, 0) == "t";
}

Status SlotAdmin::UnlockSlot(std::string_view slot_name) {
  return Query("releasing the lock of replication slot " + std::string(slot_name),
               std::string("SELECT pg_advisory_unlock(") + kSlotLockKey + ")",
               {std::string(slot_name)})
      .status();
}

Result<std::optional<int>> SlotAdmin::SlotLockHolder(std::string_view slot_name) {
  WALRELAY_ASSIGN_OR_RETURN(
      PgResultPtr r,
      Query("reading who holds the lock of replication slot " + std::string(slot_name),
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database()) AND classid = "
            "1463897170 AND objid = (hashtext($1)::bigint & 4294967295)::oid AND objsubid = 2",
            {std::string(slot_name)}));
  if (PQntuples(r.get()) == 0) return std::optional<int>();
  WALRELAY_ASSIGN_OR_RETURN(int64_t pid, ParseInt("a pid", Value(r.get(), 0, 0)));
  return std::optional<int>(static_cast<int>(pid));
}

Result<std::string> SlotAdmin::DescribeBackend(int pid) {
  WALRELAY_ASSIGN_OR_RETURN(
      PgResultPtr r,
      Query("reading who backend " + std::to_string(pid) + " serves",
            "SELECT coalesce(application_name, ''), client_addr IS NULL AND client_port = -1, "
            "coalesce(host(client_addr), ''), coalesce(client_port::text, ''), "
            "coalesce(client_hostname, ''), coalesce(to_char(backend_start AT TIME ZONE 'UTC', "
            "'YYYY-MM-DD HH24:MI:SS'), '') FROM pg_stat_activity WHERE pid = $1",
            {std::to_string(pid)}));
  std::string out = "pid " + std::to_string(pid);
  if (PQntuples(r.get()) == 0) return out + " (gone)";
  const std::string app = Value(r.get(), 0, 0);
  const bool local = Value(r.get(), 0, 1) == "t";
  const std::string addr = Value(r.get(), 0, 2);
  const std::string port = Value(r.get(), 0, 3);
  const std::string hostname = Value(r.get(), 0, 4);
  const std::string since = Value(r.get(), 0, 5);
  // Another role's session without pg_read_all_stats: PostgreSQL hides these (NULL).
  if (!app.empty()) out += ", application '" + app + "'";
  if (local) {
    out += " over a local socket";
  } else if (!addr.empty()) {
    out += " from " + (addr.find(':') != std::string::npos ? "[" + addr + "]" : addr) +
           (port.empty() ? "" : ":" + port) + (hostname.empty() ? "" : " (" + hostname + ")");
  }
  if (!since.empty()) out += ", connected " + since + " UTC";
  return out;
}

Result<int64_t> SlotAdmin::CountRowsUpTo(std::string_view qualified_table, int64_t limit) {
  WALRELAY_ASSIGN_OR_RETURN(
      PgResultPtr r,
      Query("counting the rows of " + std::string(qualified_table),
            "SELECT count(*) FROM (SELECT 1 FROM " + std::string(qualified_table) + " LIMIT " +
                std::to_string(limit) + ") s"));
  return ParseInt("a row count", Value(r.get(), 0, 0));
}

Result<Lsn> SlotAdmin::CurrentWalLsn() {
  WALRELAY_ASSIGN_OR_RETURN(
      PgResultPtr r, Query("reading the WAL position", "SELECT " + std::string(kWalPositionSql)));
  auto lsn = OptLsn(r.get(), 0, 0);
  if (!lsn) return InternalError("the WAL position was '" + Value(r.get(), 0, 0) + "'");
  return *lsn;
}

Status SlotAdmin::EmitMessage(bool transactional, std::string_view prefix,
                              std::string_view content) {
  WALRELAY_ASSIGN_OR_RETURN(
      PgResultPtr r,
      Query("emitting a logical message", "SELECT pg_logical_emit_message($1::boolean, $2, $3)",
            {transactional ? "true" : "false", std::string(prefix), std::string(content)}));
  return Status::Ok();
}

Result<ServerSettings> SlotAdmin::GetServerSettings() {
  WALRELAY_ASSIGN_OR_RETURN(
      PgResultPtr r,
      Query("reading server settings",
            "SELECT name, setting, unit FROM pg_settings WHERE name IN ('wal_level', "
            "'max_slot_wal_keep_size', 'max_replication_slots', 'max_wal_senders', "
            "'wal_sender_timeout', 'server_version_num', 'synchronized_standby_slots', "
            "'idle_replication_slot_timeout')"));
  ServerSettings s;
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    const std::string name = Value(r.get(), i, 0);
    const std::string setting = Value(r.get(), i, 1);
    const std::string unit = Value(r.get(), i, 2);
    if (name == "wal_level") {
      s.wal_level = setting;
    } else if (name == "max_slot_wal_keep_size") {
      WALRELAY_ASSIGN_OR_RETURN(int64_t v, ParseInt(name, setting));
      WALRELAY_ASSIGN_OR_RETURN(int64_t factor, UnitBytes(unit));
      s.max_slot_wal_keep_size_bytes = v < 0 ? -1 : v * factor;
    } else if (name == "max_replication_slots") {
      WALRELAY_ASSIGN_OR_RETURN(int64_t v, ParseInt(name, setting));
      s.max_replication_slots = static_cast<int>(v);
    } else if (name == "max_wal_senders") {
      WALRELAY_ASSIGN_OR_RETURN(int64_t v, ParseInt(name, setting));
      s.max_wal_senders = static_cast<int>(v);
    } else if (name == "wal_sender_timeout") {
      WALRELAY_ASSIGN_OR_RETURN(int64_t v, ParseInt(name, setting));
      const int64_t per = unit == "s" ? 1000 : unit == "min" ? 60000 : 1;
      s.wal_sender_timeout = std::chrono::milliseconds(v * per);
    } else if (name == "server_version_num") {
      WALRELAY_ASSIGN_OR_RETURN(int64_t v, ParseInt(name, setting));
      s.server_version_num = static_cast<int>(v);
    } else if (name == "synchronized_standby_slots") {
      s.synchronized_standby_slots = setting;
    } else if (name == "idle_replication_slot_timeout") {
      WALRELAY_ASSIGN_OR_RETURN(int64_t v, ParseInt(name, setting));
      const int64_t per = unit == "min" ? 60 : unit == "h" ? 3600 : 1;  // "s" on 18
      s.idle_replication_slot_timeout = std::chrono::seconds(v * per);
    }
  }
  return s;
}

std::string ResolvedTable::Display() const { return QualifiedName{schema, name}.Display(); }

Status PublicationCheck::Verdict(std::string_view publication, bool may_create) const {
  const std::string pub = QualifiedName{"", std::string(publication)}.Display();
  auto join = [](const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  if (!exists) {
    if (may_create) return Status::Ok();
    return FailedPreconditionError(
        "publication " + pub + " does not exist and create_slot is off. Fix: CREATE PUBLICATION " +
        pub + " FOR TABLE " + join(missing) + " WITH (publish_via_partition_root = true);");
  }
  // Rows committed while the publication skipped them are decoded under the publication
  // as it was then (the catalog as of their WAL): fixing it does not bring them back.
  const std::string republish =
      " Rows committed while it was so are skipped even after the fix (logical decoding reads "
      "the publication as it was when they were written): republish them after the fix "
      "(walrelay republish --since '<when the publication was changed>'; docs/operations.md, "
      "republish)";
  if (!inserts) {
    std::string keep = "insert";
    if (updates) keep += ", update";
    if (deletes) keep += ", delete";
    if (truncates) keep += ", truncate";
    return InvalidArgumentError(
        "publication " + pub +
        " does not publish inserts (its publish parameter leaves out 'insert'): outbox events "
        "are inserts, so none would reach Kafka while the slot is confirmed past them. Fix: "
        "ALTER PUBLICATION " +
        pub + " SET (publish = '" + keep + "');" + republish);
  }
  if (!row_filtered.empty()) {
    const auto& [table, filter] = row_filtered.front();
    return InvalidArgumentError(
        "publication " + pub + " publishes " + table + " with a row filter (WHERE " + filter +
        "): outbox rows it filters out would never reach Kafka while the slot is confirmed "
        "past them. Fix: BEGIN; ALTER PUBLICATION " +
        pub + " DROP TABLE " + table + "; ALTER PUBLICATION " + pub + " ADD TABLE " + table +
        "; COMMIT;" + republish);
  }
  if (!column_listed.empty()) {
    const std::string& table = column_listed.front();
    return InvalidArgumentError(
        "publication " + pub + " publishes " + table +
        " with a column list: outbox columns it leaves out would be missing from every event "
        "(mapped as absent, or dead-lettered) while the slot is confirmed past them. Fix: "
        "BEGIN; ALTER PUBLICATION " +
        pub + " DROP TABLE " + table + "; ALTER PUBLICATION " + pub + " ADD TABLE " + table +
        "; COMMIT;" + republish);
  }
  if (!partitioned.empty() && !via_root) {
    return FailedPreconditionError(
        "publication " + pub + " publishes the partitioned table " + join(partitioned) +
        " under its partitions' names (publish_via_partition_root is off), so the relay would "
        "not recognise its rows. Fix: ALTER PUBLICATION " +
        pub + " SET (publish_via_partition_root = true);");
  }
  if (!all_tables && !missing.empty()) {
    return FailedPreconditionError("publication " + pub + " does not publish " + join(missing) +
                                   ", so its events would never reach Kafka; walrelay does not "
                                   "alter publications. Fix: ALTER PUBLICATION " +
                                   pub + " ADD TABLE " + join(missing) + ";");
  }
  return Status::Ok();
}

Result<std::vector<ResolvedTable>> SlotAdmin::ResolveTables(const std::vector<std::string>& names) {
  std::vector<ResolvedTable> out;
  for (const auto& t : names) {
    WALRELAY_RETURN_IF_ERROR(ParseQualifiedName(t).status());
    WALRELAY_ASSIGN_OR_RETURN(
        PgResultPtr r, Query("resolving table " + t,
                             "SELECT c.oid, n.nspname, c.relname, c.relkind, c.relispartition "
                             "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                             "WHERE c.oid = to_regclass($1)",
                             {t}));
    if (PQntuples(r.get()) != 1) {
      return NotFoundError("outbox table " + t +
                           " does not exist. Fix: create it (see the README's outbox schema) or "
                           "correct the tables option (SQL name rules: unquoted names fold to "
                           "lower case, \"Quoted\" names keep their case)");
    }
    ResolvedTable rt;
    rt.configured = t;
    WALRELAY_ASSIGN_OR_RETURN(int64_t oid, ParseInt("oid", Value(r.get(), 0, 0)));
    rt.oid = static_cast<uint32_t>(oid);
    rt.schema = Value(r.get(), 0, 1);
    rt.name = Value(r.get(), 0, 2);
    const std::string kind = Value(r.get(), 0, 3);
    rt.partitioned = kind == "p";
    if (kind != "r" && kind != "p") {
      return FailedPreconditionError("outbox table " + t + " (" + rt.Display() +
                                     ") is not a table (relkind '" + kind +
                                     "'): only tables are published");
    }
    if (Value(r.get(), 0, 4) == "t") {
      WALRELAY_ASSIGN_OR_RETURN(
          PgResultPtr root, Query("resolving the partition root of " + t,
                                  "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c "
                                  "JOIN pg_namespace n ON n.oid = c.relnamespace "
                                  "WHERE c.oid = pg_partition_root($1::oid)",
                                  {std::to_string(rt.oid)}));
      return FailedPreconditionError(
          "outbox table " + t + " is a partition" +
          (PQntuples(root.get()) == 1 ? " of " + Value(root.get(), 0, 0) : std::string()) +
          ": walrelay publishes partitioned tables through their root, so rows of a partition "
          "arrive under the root's name. Fix: configure the partitioned (root) table instead");
    }
    out.push_back(std::move(rt));
  }
  return out;
}

Result<PublicationCheck> SlotAdmin::CheckPublication(std::string_view name,
                                                     const std::vector<ResolvedTable>& tables) {
  const std::string pub(name);
  PublicationCheck check;
  WALRELAY_ASSIGN_OR_RETURN(
      PgResultPtr p,
      Query("reading publication " + pub,
            "SELECT puballtables, pubviaroot, pubinsert, pubupdate, pubdelete, pubtruncate, oid "
            "FROM pg_publication WHERE pubname = $1",
            {pub}));
  check.exists = PQntuples(p.get()) == 1;
  check.all_tables = check.exists && Value(p.get(), 0, 0) == "t";
  check.via_root = check.exists && Value(p.get(), 0, 1) == "t";
  if (check.exists) {
    check.inserts = Value(p.get(), 0, 2) == "t";
    check.updates = Value(p.get(), 0, 3) == "t";
    check.deletes = Value(p.get(), 0, 4) == "t";
    check.truncates = Value(p.get(), 0, 5) == "t";
  }
  // Row filters and column lists (PostgreSQL 15+) on the tables themselves.
  if (check.exists && !check.all_tables && PQserverVersion(conn_.get()) >= 150000) {
    for (const ResolvedTable& t : tables) {
      WALRELAY_ASSIGN_OR_RETURN(
          PgResultPtr r,
          Query("reading publication " + pub,
                "SELECT pg_get_expr(prqual, prrelid), prattrs IS NOT NULL FROM "
                "pg_publication_rel WHERE prpubid = $1 AND prrelid = $2",
                {Value(p.get(), 0, 6), std::to_string(t.oid)}));
      if (PQntuples(r.get()) != 1) continue;
      if (!PQgetisnull(r.get(), 0, 0)) check.row_filtered.emplace_back(t.Display(), Value(r.get(), 0, 0));
      if (Value(r.get(), 0, 1) == "t") check.column_listed.push_back(t.Display());
    }
  }
  for (const ResolvedTable& t : tables) {
    if (t.partitioned) check.partitioned.push_back(t.Display());
    bool published = false;
    if (check.exists && !check.all_tables) {
      // pg_publication_tables lists what the stream names: the root with
      // publish_via_partition_root, the partitions without it.
      WALRELAY_ASSIGN_OR_RETURN(PgResultPtr r,
                                Query("reading publication " + pub,
                                      "SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND "
                                      "schemaname = $2 AND tablename = $3",
                                      {pub, t.schema, t.name}));
      published = PQntuples(r.get()) > 0;
    }
    if (!published && !check.all_tables) check.missing.push_back(t.Display());
  }
  return check;
}

Result<std::vector<ResolvedTable>> SlotAdmin::EnsurePublication(
    std::string_view name, const std::vector<std::string>& tables) {
  if (name.empty()) return InvalidArgumentError("publication name is empty");
  if (tables.empty()) {
    return InvalidArgumentError("publication " + std::string(name) + ": no tables given");
  }
  WALRELAY_ASSIGN_OR_RETURN(std::vector<ResolvedTable> resolved, ResolveTables(tables));
  WALRELAY_RETURN_IF_ERROR(EnsurePublicationOnce(name, resolved, /*retry_on_race=*/true));
  return resolved;
}

Status SlotAdmin::EnsurePublicationOnce(std::string_view name,
                                        const std::vector<ResolvedTable>& tables,
                                        bool retry_on_race) {
  WALRELAY_ASSIGN_OR_RETURN(PublicationCheck check, CheckPublication(name, tables));
  if (check.exists) return check.Verdict(name, /*may_create=*/false);
  std::string sql = "CREATE PUBLICATION " + QuoteIdentifier(name) + " FOR TABLE ";
  for (size_t i = 0; i < tables.size(); ++i) {
    if (i > 0) sql += ", ";
    sql += QualifiedName{tables[i].schema, tables[i].name}.Quoted();
  }
  sql += " WITH (publish_via_partition_root = true)";
  auto created = Query("creating publication " + std::string(name), sql);
  if (!created.ok() && created.status().code() == StatusCode::kAlreadyExists && retry_on_race) {
    return EnsurePublicationOnce(name, tables, /*retry_on_race=*/false);  // created meanwhile
  }
  return created.status();
}

std::string SlotAdmin::TransportWarning() const { return TransportSecurityWarning(conn_.get()); }

Status RequireLogicalWalLevel(const ServerSettings& settings) {
  if (settings.wal_level == "logical") return Status::Ok();
  return FailedPreconditionError("wal_level is '" + settings.wal_level +
                                 "', logical decoding needs 'logical'. Fix: ALTER SYSTEM SET "
                                 "wal_level = logical; then restart PostgreSQL (a reload is "
                                 "not enough)");
}

}  // namespace walrelay::slot
