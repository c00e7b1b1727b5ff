#include "src/relay/core/privileges.h"

#include <libpq-fe.h>

#include <cctype>
#include <set>
#include <sstream>

#include "base/sql.h"
#include "slot/pg_error.h"

namespace walrelay::relay {

namespace {

// Lower-case letters, digits and '_' (and '.' between a schema and a table): SQL reads it
// as written, so it is shown as written ("public.outbox", not "\"public\".\"outbox\"").
bool Plain(std::string_view name, bool qualified) {
  if (name.empty() || !(std::islower(static_cast<unsigned char>(name[0])) || name[0] == '_')) {
    return false;
  }
  for (char ch : name) {
    const bool ok = std::islower(static_cast<unsigned char>(ch)) ||
                    std::isdigit(static_cast<unsigned char>(ch)) || ch == '_' ||
                    (qualified && ch == '.');
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string Privilege::GrantTo(const std::string& role) const {
  const std::string target = schema ? "SCHEMA " + (Plain(object, false) ? object : QuoteIdentifier(object))
                                    : (Plain(object, true) ? object : QuoteQualifiedName(object));
  return "GRANT " + privileges + " ON " + target + " TO " +
         (Plain(role, false) ? role : QuoteIdentifier(role));
}

std::vector<Privilege> RelayPrivileges(const RelayConfig& config) {
  const bool poll = config.source_mode == SourceMode::kPoll;
  const bool janitor =
      config.outbox_retention.count() > 0 && config.outbox_cleanup == OutboxCleanup::kJanitor;
  std::vector<Privilege> tables;
  for (const std::string& t : config.tables) {
    std::string privileges = "SELECT";
    std::string why = "lost-slot recovery and dead-letters retry read outbox rows";
    if (poll) {
      privileges += ", UPDATE";
      why += "; poll mode marks them published";
    }
    if (janitor) {
      privileges += ", DELETE";
      why += "; the janitor deletes delivered rows past outbox.retention_ms";
    }
    tables.push_back({t, false, privileges, why});
  }
  tables.push_back({config.dead_letter_table, false, "SELECT, INSERT, UPDATE",
                    "dead letters are inserted (ON CONFLICT reads them) and dead-letters "
                    "retry records each outcome"});
  tables.push_back({config.progress_table, false, "SELECT, INSERT, UPDATE",
                    "the slot's progress and recovery bound are upserted"});
  std::vector<Privilege> out;
  std::set<std::string> schemas;
  for (const Privilege& p : tables) {
    const size_t dot = p.object.find('.');
    if (dot == std::string::npos) continue;
    const std::string schema = p.object.substr(0, dot);
    if (schema != "public" && schemas.insert(schema).second) {
      out.push_back({schema, true, "USAGE", "its tables are in schema " + schema});
    }
  }
  out.insert(out.end(), tables.begin(), tables.end());
  return out;
}

Result<std::vector<std::string>> MissingGrants(PGconn* conn, const RelayConfig& config) {
  std::vector<std::string> grants;
  // Schemas come first in the list. Without USAGE on a schema, PostgreSQL refuses even to
  // look its tables up ("permission denied for schema"), so their privileges cannot be
  // read: their GRANTs are all listed (granting one the role has is harmless).
  std::set<std::string> unusable_schemas;
  for (const Privilege& p : RelayPrivileges(config)) {
    const size_t dot = p.object.find('.');
    const bool blind =
        !p.schema && dot != std::string::npos && unusable_schemas.count(p.object.substr(0, dot));
    // Schema functions take the name as it is; table functions parse it as SQL would.
    const std::string name = p.schema ? p.object : QuoteQualifiedName(p.object);
    std::string missing;
    if (blind) {
      missing = p.privileges;
    } else {
      const std::string exists_sql =
          p.schema ? "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)"
                   : "SELECT to_regclass($1) IS NOT NULL";
      WALRELAY_ASSIGN_OR_RETURN(
          slot::PgResultPtr exists,
          slot::ExecPg(conn, exists_sql, {name.c_str()}, "startup check: looking up " + name));
      if (std::string_view(PQgetvalue(exists.get(), 0, 0)) != "t") continue;
      // Each privilege on its own: has_*_privilege answers for a list as "any of them".
      std::stringstream list(p.privileges);
      std::string one;
      while (std::getline(list, one, ',')) {
        while (!one.empty() && one.front() == ' ') one.erase(0, 1);
        const std::string sql = p.schema ? "SELECT has_schema_privilege($1, $2)"
                                         : "SELECT has_table_privilege($1, $2)";
        WALRELAY_ASSIGN_OR_RETURN(
            slot::PgResultPtr r,
            slot::ExecPg(conn, sql, {name.c_str(), one.c_str()},
                         "startup check: reading the privileges on " + name));
        if (std::string_view(PQgetvalue(r.get(), 0, 0)) != "t") {
          missing += (missing.empty() ? "" : ", ") + one;
        }
      }
    }
    if (missing.empty()) continue;
    if (p.schema) unusable_schemas.insert(p.object);
    Privilege need = p;
    need.privileges = missing;
    grants.push_back(need.GrantTo(PQuser(conn)) + ";  -- " + p.why);
  }
  return grants;
}

}  // namespace walrelay::relay
