#include "src/relay/dead_letter.h"

#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include <array>

#include "src/relay/schema.h"

namespace walrelay::relay {
namespace {

Status ExecOk(PGconn* conn, const std::string& sql, std::string_view what) {
  PGresult* res = PQexec(conn, sql.c_str());
  ExecStatusType st = PQresultStatus(res);
  std::string err = PQresultErrorMessage(res);
  PQclear(res);
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return Status::Ok();
  if (PQstatus(conn) != CONNECTION_OK) {
    return UnavailableError(std::string(what) + ": connection lost: " + err);
  }
  return FailedPreconditionError(std::string(what) + ": " + err);
}

}  // namespace

Status LoggingDeadLetterSink::Write(const DeadLetter& l) {
  ++count_;
  spdlog::warn("dead letter (not stored) {} of {} at {} #{}: {}", l.event_id, l.source,
               l.commit_lsn.ToString(), l.ordinal, l.reason);
  return Status::Ok();
}

Result<std::unique_ptr<DeadLetterWriter>> DeadLetterWriter::Open(const std::string& conninfo,
                                                                 const std::string& table,
                                                                 const std::string& slot) {
  PGconn* conn = PQconnectdb(conninfo.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string err = PQerrorMessage(conn);
    PQfinish(conn);
    return UnavailableError("dead-letter connection: " + err);
  }
  const std::string t = QuoteQualifiedIdentifier(table);
  Status st = ExecOk(conn, DeadLetterTableDdl(t), "creating dead-letter table " + table);
  if (!st.ok()) {
    PQfinish(conn);
    return st;
  }
  std::string insert =
      "INSERT INTO " + t +
      " (slot, source, commit_lsn, ordinal, xid, event_id, aggregate_id, event_type, topic,"
      " reason, payload) VALUES ($1, $2, $3::pg_lsn, $4::int, $5::bigint, $6, $7, $8, $9, $10,"
      " $11) ON CONFLICT (slot, commit_lsn, ordinal) DO NOTHING";
  return std::unique_ptr<DeadLetterWriter>(new DeadLetterWriter(conn, std::move(insert), slot));
}

DeadLetterWriter::DeadLetterWriter(PGconn* conn, std::string insert_sql, std::string slot)
    : conn_(conn), insert_sql_(std::move(insert_sql)), slot_(std::move(slot)) {}

DeadLetterWriter::~DeadLetterWriter() { PQfinish(conn_); }

Status DeadLetterWriter::Write(const DeadLetter& l) {
  const std::string lsn = l.commit_lsn.ToString();
  const std::string ordinal = std::to_string(l.ordinal);
  const std::string xid = std::to_string(l.xid);
  // Text parameters must be NUL-terminated: copy the views.
  const std::array<std::string, 11> values = {slot_,
                                              std::string(l.source),
                                              lsn,
                                              ordinal,
                                              xid,
                                              std::string(l.event_id),
                                              std::string(l.aggregate_id),
                                              std::string(l.event_type),
                                              std::string(l.topic),
                                              std::string(l.reason),
                                              std::string(l.payload)};
  std::array<const char*, 11> params{};
  for (size_t i = 0; i < values.size(); ++i) {
    // Empty optional fields are stored as NULL; slot, source, lsn, reason are never empty.
    params[i] = values[i].empty() ? nullptr : values[i].c_str();
  }
  PGresult* res = PQexecParams(conn_, insert_sql_.c_str(), static_cast<int>(params.size()), nullptr,
                               params.data(), nullptr, nullptr, 0);
  ExecStatusType st = PQresultStatus(res);
  std::string err = PQresultErrorMessage(res);
  PQclear(res);
  if (st == PGRES_COMMAND_OK) return Status::Ok();
  if (PQstatus(conn_) != CONNECTION_OK) {
    return UnavailableError("dead-letter write: connection lost: " + err);
  }
  return UnavailableError("dead-letter write failed (the event is not confirmed): " + err);
}

}  // namespace walrelay::relay
