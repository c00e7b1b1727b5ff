#include "src/inbox/pg.h"

#include <cstring>
#include <string>
#include <vector>

namespace walrelay::inbox::pg {

namespace {

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

Status MapError(PGconn* conn, const PGresult* res, std::string_view context) {
  const char* state = res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  std::string sqlstate = state != nullptr ? state : "";
  std::string message =
      Trim(res != nullptr && *PQresultErrorMessage(res) != '\0' ? PQresultErrorMessage(res)
                                                                : PQerrorMessage(conn));
  std::string text = std::string(context) + ": " + message;
  if (!sqlstate.empty()) text += " (SQLSTATE " + sqlstate + ")";
  if (PQstatus(conn) != CONNECTION_OK || sqlstate.empty()) return UnavailableError(text);
  const std::string cls = sqlstate.substr(0, 2);
  if (sqlstate == "40001" || sqlstate == "40P01" || cls == "08" || cls == "57" || cls == "53" ||
      cls == "58") {
    return UnavailableError(text);
  }
  if (cls == "22" || cls == "23") return InvalidArgumentError(text);
  return InternalError(text);
}

Result<ResultPtr> Exec(PGconn* conn, std::string_view sql, std::span<const RawParam> params,
                       std::string_view context) {
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
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return MapError(conn, res.get(), context);
  return res;
}

Status Command(PGconn* conn, std::string_view sql, std::string_view context) {
  const std::string query(sql);
  ResultPtr res(PQexec(conn, query.c_str()));
  const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return MapError(conn, res.get(), context);
  return Status::Ok();
}

Status Commit(PGconn* conn) {
  ResultPtr res(PQexec(conn, "COMMIT"));
  const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK) return MapError(conn, res.get(), "COMMIT");
  if (std::strcmp(PQcmdStatus(res.get()), "COMMIT") != 0) {
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
  PGconn* conn = PQconnectdb(conninfo.c_str());
  if (conn == nullptr) return UnavailableError("connect to PostgreSQL: out of memory");
  if (PQstatus(conn) != CONNECTION_OK) {
    Status st = UnavailableError("connect to PostgreSQL: " + Trim(PQerrorMessage(conn)));
    PQfinish(conn);
    return st;
  }
  // NOTICEs ("relation already exists, skipping") are not errors; keep them off stderr.
  PQsetNoticeProcessor(conn, [](void*, const char*) {}, nullptr);
  return conn;
}

}  // namespace walrelay::inbox::pg
