#include "src/relay/commands/cutover.h"

#include <libpq-fe.h>

#include "base/sql.h"
#include "slot/pg_error.h"

namespace walrelay::relay {
namespace {

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// The table's columns the mapping reads, checked against the catalog.
Status CheckColumns(PGconn* conn, const RelayConfig& config, const slot::ResolvedTable& table,
                    std::vector<std::string>* checks) {
  const OutboxColumns& c = config.columns;
  struct Wanted {
    const char* field;
    const std::string* column;
    bool required;
  };
  const Wanted wanted[] = {{"event_id", &c.event_id, true},
                           {"aggregate_id", &c.aggregate_id, true},
                           {"event_type", &c.event_type, true},
                           {"payload", &c.payload, true},
                           {"aggregate_type", &c.aggregate_type, false},
                           {"topic", &c.topic, false},
                           {"headers", &c.headers, false},
                           {"id", &c.id, false}};
  const std::string oid = std::to_string(table.oid);
  std::vector<std::string> missing;
  std::string payload_type;
  for (const Wanted& w : wanted) {
    if (w.column->empty()) continue;
    WALRELAY_ASSIGN_OR_RETURN(
        slot::PgResultPtr r,
        slot::ExecPg(conn,
                     "SELECT format_type(atttypid, atttypmod), atttypid = ANY "
                     "('{jsonb,json,text,varchar,bytea}'::regtype[]) FROM pg_attribute "
                     "WHERE attrelid = $1::oid AND attname = $2 AND attnum > 0 AND NOT "
                     "attisdropped",
                     {oid.c_str(), w.column->c_str()},
                     "cutover: reading the columns of " + table.Display()));
    if (PQntuples(r.get()) == 0) {
      missing.push_back(std::string(w.field) + " (column " + *w.column + ")");
      continue;
    }
    if (std::string_view(w.field) == "payload") {
      payload_type = PQgetvalue(r.get(), 0, 0);
      if (std::string_view(PQgetvalue(r.get(), 0, 1)) != "t") {
        return FailedPreconditionError(
            "table " + table.Display() + ": the payload column " + *w.column + " is " +
            payload_type +
            "; walrelay publishes jsonb, json, text, varchar (as their text) and bytea (as its "
            "bytes). Fix: map another column with --outbox-column payload=COLUMN");
      }
    }
  }
  if (!missing.empty()) {
    return FailedPreconditionError(
        "table " + table.Display() + " is not shaped for the outbox profile '" + config.profile +
        "': no " + Join(missing) +
        ". Fix: name its columns with --outbox-column FIELD=COLUMN (an empty COLUMN for an "
        "optional field it does not have)");
  }
  checks->push_back("table " + table.Display() + " has the mapped columns (payload " +
                    payload_type + ")");
  return Status::Ok();
}

}  // namespace

Result<TakeoverPlan> PlanTakeover(const RelayConfig& config) {
  const slot::ConnInfo conninfo = config.SourceConninfo();
  WALRELAY_ASSIGN_OR_RETURN(std::unique_ptr<slot::SlotAdmin> admin,
                            slot::SlotAdmin::Connect(conninfo));
  TakeoverPlan plan;
  WALRELAY_ASSIGN_OR_RETURN(slot::ServerSettings settings, admin->GetServerSettings());
  WALRELAY_RETURN_IF_ERROR(slot::RequireLogicalWalLevel(settings));

  // The slot.
  auto slot = admin->GetSlot(config.slot);
  if (!slot.ok()) {
    if (slot.status().code() != StatusCode::kNotFound) return slot.status();
    return FailedPreconditionError(
        "replication slot " + config.slot +
        " does not exist. The cut-over streams from the connector's slot so that nothing is "
        "missed; a new slot would start now and miss what the connector had not confirmed. "
        "Fix: name the connector's slot.name with --source-slot; if the slot is gone, "
        "republish from the outbox table instead (docs/migrating-from-debezium.md)");
  }
  plan.slot = *slot;
  WALRELAY_ASSIGN_OR_RETURN(slot::PgConnPtr conn, slot::ConnectPg(conninfo, nullptr, "cutover"));
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgResultPtr db,
      slot::ExecPg(conn.get(), "SELECT current_database()", {}, "cutover: reading the database"));
  const std::string database = PQgetvalue(db.get(), 0, 0);
  if (slot->slot_type != "logical" || slot->database != database) {
    return FailedPreconditionError(
        "replication slot " + config.slot + " is " +
        (slot->slot_type != "logical" ? "a physical slot"
                                      : "a slot of database " + slot->database) +
        ", not a logical slot of " + database + ". Fix: connect to the connector's database "
        "(database.dbname) with --source-dsn");
  }
  if (slot->plugin != config.plugin) {
    return FailedPreconditionError(
        "replication slot " + config.slot + " uses plugin " + slot->plugin +
        (slot->plugin == "pgoutput" || slot->plugin == "wal2json"
             ? ". Fix: --source-plugin " + slot->plugin
             : ", which walrelay cannot read (it reads pgoutput and wal2json). Fix: republish "
               "from the outbox table and stream from a new pgoutput slot "
               "(docs/migrating-from-debezium.md)"));
  }
  plan.checks.push_back("slot " + config.slot + " is a logical " + slot->plugin +
                        " slot of database " + database);
  if (slot->temporary) {
    return FailedPreconditionError("replication slot " + config.slot +
                                   " is temporary: it belongs to a session that is still "
                                   "open and disappears with it");
  }
  if (slot->active) {
    return FailedPreconditionError(
        "replication slot " + config.slot + " is in use by process " +
        (slot->active_pid ? std::to_string(*slot->active_pid) : std::string("?")) +
        ": the connector (or another walrelay) is still reading it. Fix: stop the connector "
        "(DELETE /connectors/NAME or pause it and wait for its task to stop), check that "
        "pg_replication_slots.active is false, then run the cut-over again");
  }
  plan.checks.push_back("slot " + config.slot + " is not in use (the connector is stopped)");
  if (slot->invalidated()) {
    return FailedPreconditionError(
        "replication slot " + config.slot + " is " +
        slot::ExplainSlotInvalidation(slot->invalidation_reason) +
        ": the WAL of the events the connector had not confirmed is gone. Fix: republish "
        "from the outbox table and stream from a new slot "
        "(docs/migrating-from-debezium.md)");
  }
  if (!slot->confirmed_flush_lsn) {
    return FailedPreconditionError("replication slot " + config.slot +
                                   " has no confirmed_flush_lsn");
  }
  plan.start = *slot->confirmed_flush_lsn;
  plan.pending_wal_bytes = slot->confirmed_lag_bytes().value_or(0);
  plan.checks.push_back("slot " + config.slot + " is valid; the connector confirmed through " +
                        plan.start.ToString() + ", " + std::to_string(plan.pending_wal_bytes) +
                        " bytes of WAL since");

  // The publication and the tables.
  if (config.tables.empty()) {
    return FailedPreconditionError("no outbox table is configured (--source-table)");
  }
  WALRELAY_ASSIGN_OR_RETURN(std::vector<slot::ResolvedTable> tables,
                            admin->ResolveTables(config.tables));
  WALRELAY_ASSIGN_OR_RETURN(slot::PublicationCheck publication,
                            admin->CheckPublication(config.publication, tables));
  WALRELAY_RETURN_IF_ERROR(publication.Verdict(config.publication, /*may_create=*/false));
  plan.publication_all_tables = publication.all_tables;
  plan.checks.push_back(
      "publication " + config.publication + " publishes the outbox tables" +
      (publication.all_tables ? " (FOR ALL TABLES: every table's changes are decoded and "
                                "sent to walrelay, which skips them; a FOR TABLE publication "
                                "of the outbox alone is cheaper)"
                              : ""));
  for (const slot::ResolvedTable& t : tables) {
    WALRELAY_RETURN_IF_ERROR(CheckColumns(conn.get(), config, t, &plan.checks));
  }
  return plan;
}

}  // namespace walrelay::relay
