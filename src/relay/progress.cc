#include "src/relay/progress.h"

#include <libpq-fe.h>

#include <vector>

#include "src/relay/schema.h"

namespace walrelay::relay {
namespace {

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

Result<ResultPtr> Run(PGconn* conn, const std::string& sql, const std::vector<std::string>& params,
                      std::string_view what) {
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p.c_str());
  ResultPtr r(PQexecParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr,
                           values.data(), nullptr, nullptr, 0));
  const ExecStatusType st = PQresultStatus(r.get());
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
  const std::string err = PQresultErrorMessage(r.get());
  if (PQstatus(conn) != CONNECTION_OK) {
    return UnavailableError(std::string(what) + ": connection lost: " + err);
  }
  return UnavailableError(std::string(what) + ": " + err);
}

}  // namespace

Result<std::unique_ptr<ProgressStore>> ProgressStore::Open(const std::string& conninfo,
                                                           const std::string& table) {
  PGconn* conn = PQconnectdb(conninfo.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string err = PQerrorMessage(conn);
    PQfinish(conn);
    return UnavailableError("progress store connection: " + err);
  }
  std::unique_ptr<ProgressStore> store(new ProgressStore(conn, QuoteQualifiedIdentifier(table)));
  WALRELAY_RETURN_IF_ERROR(
      store->Exec(ProgressTableDdl(store->table_), {}, "creating the progress table " + table));
  return store;
}

ProgressStore::~ProgressStore() { PQfinish(conn_); }

Status ProgressStore::Exec(const std::string& sql, const std::vector<std::string>& params,
                           std::string_view what) {
  return Run(conn_, sql, params, what).status();
}

Result<Progress> ProgressStore::Load(const std::string& slot) {
  WALRELAY_ASSIGN_OR_RETURN(
      ResultPtr r,
      Run(conn_,
          "SELECT source, last_id, recovering, extract(epoch FROM updated_at)::bigint FROM " +
              table_ + " WHERE slot = $1",
          {slot}, "reading recovery progress"));
  Progress p;
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    p.exists = true;
    const std::string source = PQgetvalue(r.get(), i, 0);
    if (source == "*") {
      p.recovering = std::string(PQgetvalue(r.get(), i, 2)) == "t";
      continue;
    }
    if (!PQgetisnull(r.get(), i, 1)) p.last_id[source] = std::stoll(PQgetvalue(r.get(), i, 1));
    p.updated_at_unix = std::max<int64_t>(p.updated_at_unix, std::stoll(PQgetvalue(r.get(), i, 3)));
  }
  return p;
}

Status ProgressStore::Save(const std::string& slot, const std::map<std::string, int64_t>& last_id) {
  WALRELAY_RETURN_IF_ERROR(
      Exec("INSERT INTO " + table_ + " (slot, source) VALUES ($1, '*') ON CONFLICT DO NOTHING",
           {slot}, "saving recovery progress"));
  for (const auto& [source, id] : last_id) {
    WALRELAY_RETURN_IF_ERROR(
        Exec("INSERT INTO " + table_ +
                 " AS p (slot, source, last_id) VALUES ($1, $2, $3::bigint) ON CONFLICT (slot, "
                 "source) DO UPDATE SET last_id = GREATEST(p.last_id, EXCLUDED.last_id), "
                 "updated_at = now()",
             {slot, source, std::to_string(id)}, "saving recovery progress"));
  }
  return Status::Ok();
}

Status ProgressStore::SetRecovering(const std::string& slot, bool recovering) {
  return Exec("INSERT INTO " + table_ +
                  " AS p (slot, source, recovering) VALUES ($1, '*', $2::boolean) ON CONFLICT "
                  "(slot, source) DO UPDATE SET recovering = EXCLUDED.recovering, updated_at = "
                  "now()",
              {slot, recovering ? "true" : "false"}, "marking recovery");
}

}  // namespace walrelay::relay
