#include "src/inbox/pg.h"

#include <cstring>
#include <string>
#include <vector>

namespace walrelay::inbox::pg {

namespace {

Status Failed(PGconn* conn, const PGresult* res, std::string_view context, slot::PgFault* fault) {
  slot::PgFailure f = slot::FailureFromResult(conn, res, context);
  *fault = f.fault;
  return f.status;
}

}  // namespace

Result<ResultPtr> Exec(PGconn* conn, std::string_view sql, std::span<const RawParam> params,
                       std::string_view context, slot::PgFault* fault) {
  std::vector<const char*> values(params.size());
  std::vector<int> lengths(params.size());
  std::vector<int> formats(params.size());
  // Text parameters must be NUL-terminated for libpq: copy them. Binary ones use lengths.
  std::vector<std::string> text(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    formats[i] = params[i].binary ? 1 : 0;
    if (!params[i].data) continue;
    lengths[i] = static_cast<int>(params[i].data->size());
    if (params[i].binary) {
      values[i] = params[i].data->empty() ? "" : params[i].data->data();
    } else {
      text[i] = std::string(*params[i].data);
      values[i] = text[i].c_str();
    }
  }
  const std::string query(sql);
  ResultPtr res(PQexecParams(conn, query.c_str(), static_cast<int>(params.size()), nullptr,
                             values.data(), lengths.data(), formats.data(), 0));
  const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    return Failed(conn, res.get(), context, fault);
  }
  return res;
}

Status Command(PGconn* conn, std::string_view sql, std::string_view context, slot::PgFault* fault) {
  const std::string query(sql);
  ResultPtr res(PQexec(conn, query.c_str()));
  const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    return Failed(conn, res.get(), context, fault);
  }
  return Status::Ok();
}

Status Commit(PGconn* conn, slot::PgFault* fault) {
  ResultPtr res(PQexec(conn, "COMMIT"));
  const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK) return Failed(conn, res.get(), "COMMIT", fault);
  if (std::strcmp(PQcmdStatus(res.get()), "COMMIT") != 0) {
    *fault = slot::PgFault::kServerState;
    return InternalError(
        "COMMIT rolled back: the transaction was aborted by an earlier error that the handler "
        "did not return");
  }
  return Status::Ok();
}

void Rollback(PGconn* conn) {
  if (PQstatus(conn) != CONNECTION_OK) return;
  ResultPtr res(PQexec(conn, "ROLLBACK"));
}

Result<PGconn*> Connect(const std::string& conninfo) {
  WALRELAY_ASSIGN_OR_RETURN(slot::PgConnPtr conn,
                            slot::ConnectPg(conninfo, "false", "inbox: connect to PostgreSQL"));
  // NOTICEs ("relation already exists, skipping") are not errors; keep them off stderr.
  PQsetNoticeProcessor(
      conn.get(), [](void*, const char*) {}, nullptr);
  return conn.release();
}

}  // namespace walrelay::inbox::pg
