#include "src/relay/commands/republish.h"

#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include "base/sql.h"
#include "slot/replication_connection.h"
#include "slot/slot_admin.h"
#include "src/relay/core/dead_letter.h"
#include "src/relay/core/pipeline.h"
#include "src/relay/core/schema.h"
#include "src/relay/core/progress.h"

namespace walrelay::relay {
namespace {

Status Exec(PGconn* conn, const std::string& sql, std::string_view what) {
  return slot::ExecPg(conn, sql, {}, "republish: " + std::string(what)).status();
}

Result<std::string> Scalar(PGconn* conn, const std::string& sql, std::string_view what) {
  WALRELAY_ASSIGN_OR_RETURN(slot::PgResultPtr r,
                            slot::ExecPg(conn, sql, {}, "republish: " + std::string(what)));
  return std::string(PQgetvalue(r.get(), 0, 0));
}

}  // namespace

Result<std::unique_ptr<KafkaSink>> StandaloneKafkaSink(const RelayConfig& config) {
  kafka::ProducerOptions popts;
  popts.properties.emplace_back("bootstrap.servers", config.bootstrap_servers);
  for (const auto& [k, v] : config.kafka_properties) popts.properties.emplace_back(k, v);
  return KafkaSink::Create(std::move(popts));
}

Result<std::string> RepublishPredicate(const RelayConfig& config, const RepublishRequest& request) {
  const OutboxColumns& c = config.columns;
  switch (request.rows) {
    case RepublishRequest::Rows::kAll:
      return std::string("true");
    case RepublishRequest::Rows::kSinceId:
      if (c.id.empty()) {
        return InvalidArgumentError(
            "--since-id needs an ordering id column (outbox.columns id), and this configuration "
            "has none (the debezium profile's uuid id orders nothing): use --since with a "
            "timestamp column, --event-id, or --all");
      }
      return QuoteIdentifier(c.id) + " >= " + QuoteLiteral(request.since_id);
    case RepublishRequest::Rows::kSinceTime:
      if (c.created_at.empty()) {
        return InvalidArgumentError(
            "--since needs a timestamp column (outbox.columns created_at), and this "
            "configuration has none: name one with --outbox-column created_at=COLUMN, or use "
            "--since-id, --event-id or --all");
      }
      return QuoteIdentifier(c.created_at) + " >= " + QuoteLiteral(request.since_time) +
             "::timestamptz";
    case RepublishRequest::Rows::kUnpublished:
      return std::string(QuoteIdentifier(kPublishedAtColumn)) + " IS NULL";
    case RepublishRequest::Rows::kEventIds: {
      if (request.event_ids.empty()) return InvalidArgumentError("--event-id: no event id given");
      std::string list;
      for (const std::string& id : request.event_ids) {
        if (id.find('\0') != std::string::npos) {
          return InvalidArgumentError("--event-id: an event id contains a NUL byte");
        }
        list += (list.empty() ? "" : ", ") + QuoteLiteral(id);
      }
      return QuoteIdentifier(c.event_id) + "::text IN (" + list + ")";
    }
  }
  return InternalError("republish: unknown row selection");
}

Result<RepublishResult> Republish(const RelayConfig& config, const RepublishRequest& request) {
  if (config.tables.empty()) {
    return InvalidArgumentError("republish: no outbox table is configured (--source-table)");
  }
  if (config.embedded_kafka && !request.dry_run) {
    return InvalidArgumentError(
        "republish: --kafka-embedded true would publish into a cluster that vanishes with this "
        "process; give --kafka-bootstrap-servers");
  }
  WALRELAY_ASSIGN_OR_RETURN(std::string where, RepublishPredicate(config, request));
  const slot::ConnInfo conninfo = config.SourceConninfo();
  WALRELAY_ASSIGN_OR_RETURN(std::unique_ptr<slot::SlotAdmin> admin,
                            slot::SlotAdmin::Connect(conninfo));
  if (request.create_slot && !request.dry_run) {
    // The slot's lock (slot_admin.h), held until this returns: a relay starting meanwhile
    // stands by instead of taking the new slot for one whose recovery did not finish.
    // A relay stopped a moment ago lets go of the lock only when its server process has
    // exited, shortly after the relay itself: give that 3 s before refusing.
    bool locked = false;
    for (int attempt = 0; attempt < 30 && !locked; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      WALRELAY_ASSIGN_OR_RETURN(locked, admin->TryLockSlot(config.slot));
    }
    if (!locked) {
      auto holder = admin->SlotLockHolder(config.slot);
      return FailedPreconditionError(
          "republish --create-slot: replication slot " + config.slot +
          " is being started or recovered by process " +
          (holder.ok() && *holder ? std::to_string(**holder) : std::string("?")) +
          " (a walrelay run holding the slot's lock). Fix: stop every walrelay run of this "
          "slot first; a relay that recovers the slot by itself needs no republish");
    }
  }
  auto slot = admin->GetSlot(config.slot);
  if (!slot.ok() && slot.status().code() != StatusCode::kNotFound) return slot.status();
  // The progress store: a republish that makes the slot marks it unfinished first (a relay
  // then recovers or refuses it, never streams it as if nothing happened: invariant 11),
  // and one that finds its own unfinished slot resumes with it.
  std::unique_ptr<ProgressStore> progress;
  bool resume = false;
  if (request.create_slot && !request.dry_run) {
    WALRELAY_ASSIGN_OR_RETURN(progress, ProgressStore::Open(conninfo, config.progress_table));
    WALRELAY_ASSIGN_OR_RETURN(Progress p, progress->Load(config.slot));
    resume = slot.ok() && !slot->invalidated() && p.recovering && p.slot_origin == "republish" &&
             p.delivered && slot->confirmed_flush_lsn && p.Vouches(slot->confirmed_flush_lsn);
  }
  if (request.create_slot && !resume) {
    if (slot.ok()) {
      return FailedPreconditionError(
          "republish --create-slot: replication slot " + config.slot +
          " exists; it already holds the events committed since it was made, so `walrelay run` "
          "streams them. Fix: republish without --create-slot (the rows before the slot; if "
          "an earlier republish --create-slot failed after creating it, the same selection "
          "again: rows committed since the slot was made then come twice, none is lost), or "
          "drop the slot first if it is one you mean to replace");
    }
    if (!request.dry_run) {
      WALRELAY_RETURN_IF_ERROR(
          admin->EnsurePublication(config.publication, config.tables).status());
    }
  } else if (slot.ok() && slot->active && !request.while_relay_runs) {
    return FailedPreconditionError(
        "republish: replication slot " + config.slot + " is being read by process " +
        (slot->active_pid ? std::to_string(*slot->active_pid) : std::string("?")) +
        " (a running relay): republished rows would interleave with the new events of the "
        "same aggregates in their partitions. Fix: stop the relay first, or pass "
        "--while-relay-runs if consumers tolerate that order");
  }

  RepublishResult out;
  // The snapshot: the new slot's exported one, or this transaction's own.
  std::unique_ptr<slot::ReplicationConnection> replication;
  WALRELAY_ASSIGN_OR_RETURN(slot::PgConnPtr conn,
                            slot::ConnectPg(conninfo, nullptr, "republish connection"));
  std::string snapshot_name;
  if (resume) {
    // The slot an earlier republish --create-slot made and did not finish: its WAL holds
    // every event since it began. The rows again under a fresh snapshot: those committed
    // since the slot began come twice, none is missed.
    out.slot_created = true;
    spdlog::warn("republish: slot {} was made by a republish --create-slot that did not finish "
                 "(since {}): resuming with it, under a fresh snapshot",
                 config.slot, slot->confirmed_flush_lsn->ToString());
  } else if (request.create_slot && !request.dry_run) {
    WALRELAY_RETURN_IF_ERROR(progress->SetRecovering(config.slot, true));
    WALRELAY_RETURN_IF_ERROR(progress->SaveSlotOrigin(config.slot, "republish"));
    WALRELAY_ASSIGN_OR_RETURN(replication, slot::ReplicationConnection::Connect(conninfo));
    WALRELAY_ASSIGN_OR_RETURN(slot::CreatedSlot created,
                              replication->CreateLogicalSlot(
                                  config.slot, config.plugin, /*temporary=*/false,
                                  /*export_snapshot=*/true,
                                  config.WantsFailoverSlot(replication->server_version())));
    out.slot_created = true;
    out.position = created.consistent_point;
    snapshot_name = created.snapshot_name;
    // The slot's identity (core/progress.h): a relay finds it unadvanced and unfinished.
    WALRELAY_RETURN_IF_ERROR(progress->SaveDelivered(config.slot, out.position));
    spdlog::info("republish: created slot {} at {}; republishing the rows of its snapshot",
                 config.slot, created.consistent_point.ToString());
  }
  WALRELAY_RETURN_IF_ERROR(
      Exec(conn.get(), "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", "BEGIN"));
  if (!snapshot_name.empty()) {
    WALRELAY_RETURN_IF_ERROR(Exec(conn.get(), "SET TRANSACTION SNAPSHOT " +
                                                  QuoteLiteral(snapshot_name),
                                  "importing the slot's snapshot"));
    replication.reset();  // imported: the exporting connection may go
  } else {
    // The first statement fixes the snapshot; the position is read in it.
    WALRELAY_ASSIGN_OR_RETURN(std::string lsn, Scalar(conn.get(),
                                                      "SELECT pg_current_wal_insert_lsn()",
                                                      "reading the WAL position"));
    auto parsed = Lsn::Parse(lsn);
    if (!parsed) return InternalError("republish: cannot parse the WAL position " + lsn);
    out.position = *parsed;
  }
  WALRELAY_ASSIGN_OR_RETURN(std::string snapshot,
                            Scalar(conn.get(), "SELECT pg_current_snapshot()::text",
                                   "reading the snapshot"));
  const uint64_t xmin = SnapshotBound{snapshot, out.position}.Xmin();

  RowSelection selection;
  selection.where = where;
  selection.order_by = RowOrder(config, xmin > (uint64_t{1} << 31) ? xmin - (uint64_t{1} << 31)
                                                                   : 0);
  selection.log_name = "republish";
  selection.what = "WHERE " + where;
  selection.count_only = request.dry_run;

  if (request.consumer_retention.count() > 0 && !config.columns.created_at.empty()) {
    uint64_t older = 0;
    for (const std::string& table : config.tables) {
      WALRELAY_ASSIGN_OR_RETURN(
          std::string n,
          Scalar(conn.get(),
                 "SELECT count(*) FROM " + QuoteQualifiedName(table) + " WHERE (" + where +
                     ") AND " + QuoteIdentifier(config.columns.created_at) + " < now() - " +
                     QuoteLiteral(std::to_string(request.consumer_retention.count()) +
                                  " milliseconds") +
                     "::interval",
                 "counting the rows older than the consumer retention"));
      older += std::stoull(n);
    }
    if (older > 0) {
      spdlog::warn(
          "republish: {} of the selected rows are older than the consumers' inbox retention "
          "({} ms): an inbox dead-letters such a record instead of applying it, since its "
          "inbox row may be gone and it cannot tell whether it applied the event. Consumers "
          "that must apply them: re-drive them from their dead letters after checking",
          older, request.consumer_retention.count());
    }
  }
  std::unique_ptr<RecordSink> sink;
  std::unique_ptr<DeadLetterSink> dead_letters;
  if (request.dry_run) {
    sink = std::make_unique<NullSink>();
    dead_letters = std::make_unique<LoggingDeadLetterSink>();
  } else {
    WALRELAY_ASSIGN_OR_RETURN(sink, StandaloneKafkaSink(config));
    WALRELAY_ASSIGN_OR_RETURN(
        dead_letters, DeadLetterWriter::Open(conninfo, config.dead_letter_table, config.slot));
  }
  RelayStats stats;
  WALRELAY_ASSIGN_OR_RETURN(out.rows, PublishRows(config, conn.get(), selection, out.position,
                                                  *sink, *dead_letters, stats));
  WALRELAY_RETURN_IF_ERROR(Exec(conn.get(), "COMMIT", "COMMIT"));
  if (out.slot_created) {
    WALRELAY_RETURN_IF_ERROR(progress->SaveBound(config.slot, SnapshotBound{snapshot, out.position}));
    if (resume) {  // the slot streams from where it began, all before which is delivered now
      WALRELAY_RETURN_IF_ERROR(progress->SaveDelivered(config.slot, *slot->confirmed_flush_lsn));
    }
    // An earlier recovery that did not finish is superseded: the new slot is complete.
    WALRELAY_RETURN_IF_ERROR(progress->SetRecovering(config.slot, false));
  }
  return out;
}

}  // namespace walrelay::relay
