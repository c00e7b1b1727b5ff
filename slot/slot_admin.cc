#include "slot/slot_admin.h"

#include <cerrno>
#include <cstdlib>

namespace walrelay::slot {
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

std::string QuoteIdent(PGconn* conn, const std::string& ident) {
  char* q = PQescapeIdentifier(conn, ident.data(), ident.size());
  if (q == nullptr) return "\"" + ident + "\"";
  std::string out(q);
  PQfreemem(q);
  return out;
}

// For messages an operator copies: quotes only when the name is not plain lower case.
std::string DisplayIdent(PGconn* conn, const std::string& ident) {
  bool plain = !ident.empty() && !(ident[0] >= '0' && ident[0] <= '9');
  for (char c : ident) {
    plain = plain && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  }
  return plain ? ident : QuoteIdent(conn, ident);
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

Result<std::unique_ptr<SlotAdmin>> SlotAdmin::Connect(std::string_view conninfo) {
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

Result<std::vector<SlotInfo>> SlotAdmin::SelectSlots(const std::string& where,
                                                     const std::vector<std::string>& params) {
  // `conflicting` exists since PostgreSQL 16, `invalidation_reason` since 17.
  const int version = PQserverVersion(conn_.get());
  const std::string sql =
      "SELECT slot_name, plugin, slot_type, database, temporary, active, active_pid, "
      "restart_lsn, confirmed_flush_lsn, wal_status, safe_wal_size, pg_current_wal_lsn(), " +
      std::string(version >= 160000 ? "conflicting, " : "NULL::boolean, ") +
      (version >= 170000 ? "invalidation_reason " : "NULL::text ") + "FROM pg_replication_slots " +
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

Result<Lsn> SlotAdmin::CurrentWalLsn() {
  WALRELAY_ASSIGN_OR_RETURN(PgResultPtr r,
                            Query("reading pg_current_wal_lsn()", "SELECT pg_current_wal_lsn()"));
  auto lsn = OptLsn(r.get(), 0, 0);
  if (!lsn) return InternalError("pg_current_wal_lsn() returned '" + Value(r.get(), 0, 0) + "'");
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

Result<bool> SlotAdmin::HasReplicationPrivilege() {
  WALRELAY_ASSIGN_OR_RETURN(PgResultPtr r, Query("checking the REPLICATION attribute",
                                                 "SELECT rolreplication OR rolsuper FROM pg_roles "
                                                 "WHERE rolname = current_user"));
  if (PQntuples(r.get()) != 1) return InternalError("current_user not found in pg_roles");
  return Value(r.get(), 0, 0) == "t";
}

Result<ServerSettings> SlotAdmin::GetServerSettings() {
  WALRELAY_ASSIGN_OR_RETURN(
      PgResultPtr r,
      Query("reading server settings",
            "SELECT name, setting, unit FROM pg_settings WHERE name IN ('wal_level', "
            "'max_slot_wal_keep_size', 'max_replication_slots', 'max_wal_senders', "
            "'wal_sender_timeout', 'server_version_num')"));
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
    }
  }
  return s;
}

Status SlotAdmin::EnsurePublication(std::string_view name, const std::vector<std::string>& tables) {
  return EnsurePublicationOnce(name, tables, /*retry_on_race=*/true);
}

Status SlotAdmin::EnsurePublicationOnce(std::string_view name,
                                        const std::vector<std::string>& tables,
                                        bool retry_on_race) {
  const std::string pub(name);
  if (pub.empty()) return InvalidArgumentError("publication name is empty");
  if (tables.empty()) return InvalidArgumentError("publication " + pub + ": no tables given");

  // Resolve each table as SQL would, to (schema, name).
  std::vector<std::pair<std::string, std::string>> resolved;
  for (const auto& t : tables) {
    WALRELAY_ASSIGN_OR_RETURN(PgResultPtr r, Query("resolving table " + t,
                                                   "SELECT n.nspname, c.relname FROM pg_class c "
                                                   "JOIN pg_namespace n ON n.oid = c.relnamespace "
                                                   "WHERE c.oid = to_regclass($1)",
                                                   {t}));
    if (PQntuples(r.get()) != 1) {
      return NotFoundError("publication " + pub + ": table " + t +
                           " does not exist; create it first or check the name");
    }
    resolved.emplace_back(Value(r.get(), 0, 0), Value(r.get(), 0, 1));
  }

  WALRELAY_ASSIGN_OR_RETURN(
      PgResultPtr p, Query("reading publication " + pub,
                           "SELECT puballtables FROM pg_publication WHERE pubname = $1", {pub}));
  if (PQntuples(p.get()) == 1) {
    if (Value(p.get(), 0, 0) == "t") return Status::Ok();
    WALRELAY_ASSIGN_OR_RETURN(PgResultPtr pt,
                              Query("reading publication " + pub,
                                    "SELECT schemaname, tablename FROM pg_publication_tables "
                                    "WHERE pubname = $1",
                                    {pub}));
    std::string missing;
    for (const auto& [schema, table] : resolved) {
      bool found = false;
      for (int i = 0; i < PQntuples(pt.get()) && !found; ++i) {
        found = Value(pt.get(), i, 0) == schema && Value(pt.get(), i, 1) == table;
      }
      if (!found) {
        if (!missing.empty()) missing += ", ";
        missing += DisplayIdent(conn_.get(), schema) + "." + DisplayIdent(conn_.get(), table);
      }
    }
    if (missing.empty()) return Status::Ok();
    return FailedPreconditionError("publication " + pub + " exists but does not publish " +
                                   missing + "; walrelay does not alter publications: run " +
                                   "ALTER PUBLICATION " + DisplayIdent(conn_.get(), pub) +
                                   " ADD TABLE " + missing + " (or use another publication)");
  }

  std::string sql = "CREATE PUBLICATION " + QuoteIdent(conn_.get(), pub) + " FOR TABLE ";
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (i > 0) sql += ", ";
    sql += QuoteIdent(conn_.get(), resolved[i].first) + "." +
           QuoteIdent(conn_.get(), resolved[i].second);
  }
  auto created = Query("creating publication " + pub, sql);
  if (!created.ok() && created.status().code() == StatusCode::kAlreadyExists && retry_on_race) {
    return EnsurePublicationOnce(name, tables, /*retry_on_race=*/false);  // created meanwhile
  }
  return created.status();
}

}  // namespace walrelay::slot
