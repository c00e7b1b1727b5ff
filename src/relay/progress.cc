#include "src/relay/progress.h"

#include <vector>

#include "src/relay/schema.h"

namespace walrelay::relay {
Result<std::unique_ptr<ProgressStore>> ProgressStore::Open(const std::string& conninfo,
                                                           const std::string& table) {
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgConnPtr conn,
      slot::ConnectPg(conninfo, nullptr, "progress store connection", slot::kRelaySession));
  std::unique_ptr<ProgressStore> store(
      new ProgressStore(std::move(conn), QuoteQualifiedName(table)));
  WALRELAY_RETURN_IF_ERROR(slot::CreateTableIfMissing(store->conn_.get(), store->table_,
                                                      ProgressTableDdl(store->table_),
                                                      "creating the progress table " + table));
  return store;
}

Result<slot::PgResultPtr> ProgressStore::Exec(const std::string& sql,
                                              const std::vector<std::string>& params,
                                              std::string_view what) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p.c_str());
  return slot::ExecPg(conn_.get(), sql, values, what);
}

Result<Progress> ProgressStore::Load(const std::string& slot) {
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgResultPtr r,
      Exec("SELECT source, last_id, recovering, extract(epoch FROM updated_at)::bigint FROM " +
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
           {slot}, "saving recovery progress")
          .status());
  for (const auto& [source, id] : last_id) {
    WALRELAY_RETURN_IF_ERROR(
        Exec("INSERT INTO " + table_ +
                 " AS p (slot, source, last_id) VALUES ($1, $2, $3::bigint) ON CONFLICT (slot, "
                 "source) DO UPDATE SET last_id = GREATEST(p.last_id, EXCLUDED.last_id), "
                 "updated_at = now()",
             {slot, source, std::to_string(id)}, "saving recovery progress")
            .status());
  }
  return Status::Ok();
}

Status ProgressStore::SetRecovering(const std::string& slot, bool recovering) {
  return Exec("INSERT INTO " + table_ +
                  " AS p (slot, source, recovering) VALUES ($1, '*', $2::boolean) ON CONFLICT "
                  "(slot, source) DO UPDATE SET recovering = EXCLUDED.recovering, updated_at = "
                  "now()",
              {slot, recovering ? "true" : "false"}, "marking recovery")
      .status();
}

}  // namespace walrelay::relay
