#include "slot/pg_error.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace walrelay::slot {
namespace {

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  return std::string(s);
}

bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

std::string Join(std::string_view context, std::string_view message, std::string_view fix,
                 std::string_view separator = "; ") {
  std::string m(context);
  if (!m.empty()) m += ": ";
  m += Trim(message);
  if (!fix.empty()) {
    m += separator;
    m += fix;
  }
  return m;
}

std::string ReplicationFix(std::string_view role) {
  std::string r = role.empty() ? std::string("<role>") : std::string(role);
  return "role " + r + " may not open replication connections. Fix: self-hosted, Azure "
         "Flexible Server or Cloud SQL: ALTER ROLE " + r +
         " REPLICATION (as a superuser, a member of azure_pg_admin, or of cloudsqlsuperuser); "
         "Amazon RDS or Aurora: GRANT rds_replication TO " + r +
         " (as the master user), with rds.logical_replication = 1 in the parameter group; "
         "docs/operations.md section 7";
}

}  // namespace

namespace {

constexpr SqlStateRule kSqlStateRules[] = {
    {"55006", StatusCode::kFailedPrecondition, PgFault::kTransient, "object in use"},
    {"55P03", StatusCode::kFailedPrecondition, PgFault::kTransient, "lock not available"},
    {"55000", StatusCode::kFailedPrecondition, PgFault::kServerState,
     "object not in prerequisite state"},
    {"53400", StatusCode::kResourceExhausted, PgFault::kServerState,
     "configuration limit exceeded"},
    {"42501", StatusCode::kPermissionDenied, PgFault::kStatement, "insufficient privilege"},
    {"42704", StatusCode::kNotFound, PgFault::kStatement, "undefined object"},
    {"42710", StatusCode::kAlreadyExists, PgFault::kStatement, "duplicate object"},
    {"08", StatusCode::kUnavailable, PgFault::kTransient, "connection exception"},
    {"40", StatusCode::kUnavailable, PgFault::kTransient, "transaction rollback"},
    {"53", StatusCode::kUnavailable, PgFault::kTransient, "insufficient resources"},
    {"57", StatusCode::kUnavailable, PgFault::kTransient, "operator intervention"},
    {"58", StatusCode::kUnavailable, PgFault::kTransient, "system error"},
    {"XX", StatusCode::kUnavailable, PgFault::kTransient, "internal error"},
    {"", StatusCode::kUnavailable, PgFault::kTransient, "no SQLSTATE: client-side failure"},
    {"22", StatusCode::kInvalidArgument, PgFault::kData, "data exception"},
    {"23", StatusCode::kFailedPrecondition, PgFault::kData, "integrity constraint violation"},
    {"54", StatusCode::kResourceExhausted, PgFault::kData, "program limit exceeded"},
    {"42", StatusCode::kInvalidArgument, PgFault::kStatement,
     "syntax error or access rule violation"},
    {"0A", StatusCode::kFailedPrecondition, PgFault::kStatement, "feature not supported"},
};

constexpr SqlStateRule kDefaultRule = {"*", StatusCode::kFailedPrecondition, PgFault::kServerState,
                                       "other"};

}  // namespace

std::string_view PgFaultName(PgFault fault) {
  switch (fault) {
    case PgFault::kTransient:
      return "transient";
    case PgFault::kServerState:
      return "server state";
    case PgFault::kData:
      return "data";
    case PgFault::kStatement:
      return "statement";
  }
  return "?";
}

std::span<const SqlStateRule> SqlStateTable() { return kSqlStateRules; }

const SqlStateRule& ClassifySqlState(std::string_view sqlstate) {
  for (const SqlStateRule& r : kSqlStateRules) {
    if (r.sqlstate.size() == 5 ? sqlstate == r.sqlstate
        : r.sqlstate.empty()   ? sqlstate.empty()
                               : sqlstate.substr(0, 2) == r.sqlstate) {
      return r;
    }
  }
  return kDefaultRule;
}

Status MapPgError(std::string_view sqlstate, std::string_view server_message, std::string_view role,
                  std::string_view context) {
  if (sqlstate == "55006") {
    return FailedPreconditionError(
        Join(context, server_message,
             Contains(server_message, "replication slot")
                 ? "another walrelay (or client) is reading it; stop it or use another slot"
                 : "the object is in use by another session; stop that session first",
             ": "));
  }
  if (sqlstate == "42501") {
    const bool replication =
        Contains(server_message, "replication") || Contains(server_message, "REPLICATION") ||
        Contains(server_message, "WAL sender") || Contains(server_message, "walsender");
    return PermissionDeniedError(
        Join(context, server_message,
             replication ? ReplicationFix(role)
                         : "grant role " + std::string(role) + " the privilege named above"));
  }
  if (sqlstate == "42704") {
    return NotFoundError(Join(context, server_message, "create it first or check the name"));
  }
  if (sqlstate == "42710") {
    return AlreadyExistsError(Join(context, server_message, ""));
  }
  if (sqlstate == "55000" && Contains(server_message, "wal_level")) {
    return FailedPreconditionError(
        Join(context, server_message,
             "set wal_level = logical (postgresql.conf or ALTER SYSTEM SET wal_level = logical) "
             "and restart the PostgreSQL server"));
  }
  if (sqlstate == "53400") {
    return ResourceExhaustedError(
        Join(context, server_message,
             "raise max_replication_slots / max_wal_senders or drop unused slots"));
  }
  const SqlStateRule& rule = ClassifySqlState(sqlstate);
  if (rule.code == StatusCode::kUnavailable) {
    return UnavailableError(Join(context, server_message, "retry"));
  }
  return Status(
      rule.code,
      Join(context, std::string(server_message) + " (SQLSTATE " + std::string(sqlstate) + ")", ""));
}

Status StatusFromResult(PGconn* conn, const PGresult* res, std::string_view context) {
  const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  std::string message;
  if (res != nullptr) {
    const char* primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    message = primary ? primary : PQresultErrorMessage(res);
  }
  if (message.empty() && conn != nullptr) message = PQerrorMessage(conn);
  if (message.empty()) message = "unknown error";
  const char* user = conn ? PQuser(conn) : nullptr;
  return MapPgError(state ? state : "", message, user ? user : "", context);
}

PgFailure FailureFromResult(PGconn* conn, const PGresult* res, std::string_view context) {
  const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  Status st = StatusFromResult(conn, res, context);
  if (conn == nullptr || PQstatus(conn) != CONNECTION_OK) {
    return {UnavailableError(st.message()), PgFault::kTransient};
  }
  return {std::move(st), ClassifySqlState(state ? state : "").fault};
}

Status StatusFromConnectFailure(PGconn* conn, std::string_view context) {
  const std::string message = conn ? Trim(PQerrorMessage(conn)) : "out of memory";
  const char* user_c = conn ? PQuser(conn) : nullptr;
  const std::string user = user_c ? user_c : "";
  if (Contains(message, "replication role") || Contains(message, "start WAL sender") ||
      Contains(message, "start walsender")) {
    return PermissionDeniedError(Join(context, message, ReplicationFix(user)));
  }
  if (Contains(message, "no pg_hba.conf entry")) {
    return FailedPreconditionError(
        Join(context, message,
             "add a pg_hba.conf line allowing this role, database and host (replication=database "
             "connections match on the database name) and reload the server"));
  }
  if (Contains(message, "authentication failed")) {
    return PermissionDeniedError(Join(context, message, "check the user name and password"));
  }
  if (Contains(message, "no password supplied")) {
    // The server asks for a password and none was given: as definite as a wrong one.
    return PermissionDeniedError(Join(
        context, message,
        "the server asks role " + (user.empty() ? std::string("(libpq's default)") : user) +
            " for a password and none was given: put it in a file only walrelay's user can "
            "read and pass --source-password-file (source.password_file), or set PGPASSWORD, "
            "or add a ~/.pgpass line for this host"));
  }
  if (Contains(message, "does not exist") && !Contains(message, "No such file")) {
    return NotFoundError(Join(context, message, "check the user and database names"));
  }
  if (Contains(message, "exceeds max_wal_senders")) {
    return ResourceExhaustedError(
        Join(context, message, "raise max_wal_senders or stop other replication clients"));
  }
  return UnavailableError(Join(context, message, "retry when the server is reachable"));
}

std::chrono::milliseconds ClientWaitBound(PGconn* conn) {
  const char* options = conn ? PQoptions(conn) : nullptr;
  if (options == nullptr) return std::chrono::milliseconds(0);
  const std::string_view o(options);
  constexpr std::string_view kKey = "statement_timeout=";
  const size_t at = o.rfind(kKey);  // the last setting wins, as on the server
  if (at == std::string_view::npos) return std::chrono::milliseconds(0);
  int64_t ms = 0;
  for (size_t i = at + kKey.size(); i < o.size() && o[i] >= '0' && o[i] <= '9'; ++i) {
    ms = ms * 10 + (o[i] - '0');
  }
  if (ms <= 0) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(ms) + kClientWaitGrace;
}

namespace {
thread_local ServerWaitObserver t_server_wait_observer;
}  // namespace

ScopedServerWaitObserver::ScopedServerWaitObserver(ServerWaitObserver observer)
    : previous_(std::exchange(t_server_wait_observer, std::move(observer))) {}

ScopedServerWaitObserver::~ScopedServerWaitObserver() {
  t_server_wait_observer = std::move(previous_);
}

namespace {

// Tells the thread's observer, if it heard of a wait, that the wait is over.
struct TellEnd {
  const bool& told;
  std::string_view context;
  std::chrono::steady_clock::time_point start;
  ~TellEnd() {
    if (told && t_server_wait_observer) {
      t_server_wait_observer(context,
                             std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now() - start),
                             true);
    }
  }
};

// Waits until PQgetResult(conn) will not block, in slices of a second that tell the
// thread's observer (`*told` set once it heard of the wait). False when reading failed
// (the connection's error says why); kUnavailable past `bound` from `start` (0: none),
// with the connection shut down.
Result<bool> WaitNotBusy(PGconn* conn, std::string_view context,
                         std::chrono::steady_clock::time_point start,
                         std::chrono::milliseconds bound, bool* told) {
  constexpr std::chrono::milliseconds kSlice{1000};
  const auto deadline = start + bound;
  while (PQisBusy(conn)) {
    const auto now = std::chrono::steady_clock::now();
    auto slice = kSlice;
    if (bound.count() > 0) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
      if (left.count() <= 0) {
        ::shutdown(PQsocket(conn), SHUT_RDWR);
        return UnavailableError(
            std::string(context) + ": no answer from the server within " +
            std::to_string(bound.count() / 1000) +
            " s (statement_timeout plus a grace): connection presumed dead (half-open); the "
            "session restarts with new connections. If this repeats, check the network path "
            "to the server");
      }
      slice = std::min(slice, left);
    }
    pollfd pfd{PQsocket(conn), POLLIN, 0};
    const int pr = ::poll(&pfd, 1, static_cast<int>(slice.count()));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) {
      if (t_server_wait_observer) {
        *told = true;
        t_server_wait_observer(context,
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - start),
                               false);
      }
      continue;
    }
    if (pr < 0 || PQconsumeInput(conn) == 0) return false;
  }
  return true;
}

}  // namespace

Result<PgResultPtr> AwaitResults(PGconn* conn, std::string_view context,
                                 std::chrono::milliseconds bound) {
  const auto start = std::chrono::steady_clock::now();
  bool told = false;  // the observer heard of this wait: it hears of its end too
  TellEnd tell_end{told, context, start};
  PgResultPtr kept;
  for (;;) {
    WALRELAY_ASSIGN_OR_RETURN(bool readable, WaitNotBusy(conn, context, start, bound, &told));
    if (!readable) return PgResultPtr();
    PGresult* r = PQgetResult(conn);
    if (r == nullptr) return kept;
    const ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_COPY_BOTH || st == PGRES_COPY_OUT || st == PGRES_COPY_IN) {
      return PgResultPtr(r);  // the connection is in COPY now: no further results to read
    }
    // Keep the first error, else the last result (one per statement).
    if (!kept || PQresultStatus(kept.get()) == PGRES_COMMAND_OK ||
        PQresultStatus(kept.get()) == PGRES_TUPLES_OK) {
      kept.reset(r);
    } else {
      PQclear(r);
    }
  }
}

Result<PgResultPtr> AwaitResult(PGconn* conn, std::string_view context,
                                std::chrono::steady_clock::time_point start,
                                std::chrono::milliseconds bound) {
  bool told = false;
  TellEnd tell_end{told, context, start};
  WALRELAY_ASSIGN_OR_RETURN(bool readable, WaitNotBusy(conn, context, start, bound, &told));
  if (!readable) return PgResultPtr();
  return PgResultPtr(PQgetResult(conn));
}

Result<PgResultPtr> SendAndAwait(PGconn* conn, const std::string& sql,
                                 const std::vector<const char*>& params, bool simple,
                                 std::string_view context, std::chrono::milliseconds bound) {
  const int sent = simple ? PQsendQuery(conn, sql.c_str())
                          : PQsendQueryParams(conn, sql.c_str(), static_cast<int>(params.size()),
                                              nullptr, params.data(), nullptr, nullptr, 0);
  if (sent == 0) return PgResultPtr();  // the caller maps the connection's error
  return AwaitResults(conn, context, bound);
}

Result<PgResultPtr> ExecPg(PGconn* conn, const std::string& sql,
                           const std::vector<const char*>& params, std::string_view context) {
  WALRELAY_ASSIGN_OR_RETURN(PgResultPtr res,
                            SendAndAwait(conn, sql, params, false, context, ClientWaitBound(conn)));
  const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return res;
  Status s = StatusFromResult(conn, res.get(), context);
  if (PQstatus(conn) == CONNECTION_BAD) return UnavailableError(s.message());
  return s;
}

Status CreateTableIfMissing(PGconn* conn, const std::string& table, const std::string& create_ddl,
                            std::string_view context) {
  auto exists = [&]() -> Result<bool> {
    WALRELAY_ASSIGN_OR_RETURN(PgResultPtr r, ExecPg(conn, "SELECT to_regclass($1) IS NOT NULL",
                                                    {table.c_str()}, context));
    return PQntuples(r.get()) == 1 && std::string_view(PQgetvalue(r.get(), 0, 0)) == "t";
  };
  WALRELAY_ASSIGN_OR_RETURN(bool before, exists());
  if (before) return Status::Ok();
  Status created = ExecPg(conn, create_ddl, {}, context).status();
  if (created.ok()) return created;
  // Another session created it between the check and the CREATE (two relays starting
  // together): the CREATE waited for that session and failed (42P07, or 23505 in the
  // catalog). The table exists now, which is what was asked for.
  Result<bool> after = exists();
  if (after.ok() && *after) return Status::Ok();
  return created;
}

Result<std::string> SessionOptions(std::string_view conninfo, const SessionSettings& settings) {
  const std::string ci(conninfo);
  char* error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(ci.c_str(), &error);
  if (parsed == nullptr) {
    std::string why = error ? Trim(error) : "out of memory";
    PQfreemem(error);
    return InvalidArgumentError("connection string: " + why + "; fix the DSN");
  }
  std::string options;
  for (PQconninfoOption* o = parsed; o->keyword != nullptr; ++o) {
    if (std::string_view(o->keyword) == "options" && o->val != nullptr) options = o->val;
  }
  PQconninfoFree(parsed);
  if (options.empty()) {
    if (const char* env = std::getenv("PGOPTIONS")) options = env;
  }
  auto add = [&options](const std::string& setting) {
    if (!options.empty()) options += ' ';
    options += "-c " + setting;
  };
  add("standard_conforming_strings=on");
  if (settings.local_commit) add("synchronous_commit=local");
  if (settings.statement_timeout.count() > 0) {
    add("statement_timeout=" + std::to_string(settings.statement_timeout.count()));
  }
  return options;
}

std::string TransportSecurityWarning(std::string_view host, std::string_view port,
                                     bool ssl_in_use, std::string_view sslmode) {
  const bool local = host.empty() || host.front() == '/' || host.front() == '@' ||
                     host == "localhost" || host.starts_with("127.") || host == "::1";
  if (local || (ssl_in_use && sslmode == "verify-full")) return "";
  const std::string where = std::string(host) + ":" + std::string(port);
  if (!ssl_in_use) {
    return "the connection to " + where + " is not encrypted (sslmode=" + std::string(sslmode) +
           "): anyone on the network path can read the events and the password exchange, "
           "or alter them. Fix: enable ssl on the server and connect with sslmode=verify-full "
           "sslrootcert=<the server's CA file>";
  }
  return "the connection to " + where + " is encrypted but the server is not verified (sslmode=" +
         std::string(sslmode) +
         "): anyone who can intercept it can pose as the server. Fix: sslmode=verify-full "
         "sslrootcert=<the server's CA file> (verify-ca does not check the host name)";
}

std::string TransportSecurityWarning(PGconn* conn) {
  std::string sslmode = "prefer";
  if (PQconninfoOption* opts = PQconninfo(conn)) {
    for (const PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
      if (std::string_view(o->keyword) == "sslmode" && o->val != nullptr) sslmode = o->val;
    }
    PQconninfoFree(opts);
  }
  const char* host = PQhost(conn);
  const char* port = PQport(conn);
  return TransportSecurityWarning(host ? host : "", port ? port : "", PQsslInUse(conn) == 1,
                                  sslmode);
}

Result<PgConnPtr> ConnectPg(const ConnInfo& conninfo, const char* replication,
                            std::string_view context, const SessionSettings& settings) {
  auto session_options = SessionOptions(conninfo.dsn, settings);
  if (!session_options.ok()) return session_options.status().WithContext(context);
  const std::string options = std::move(*session_options);
  // Keywords before "dbname" are defaults the conninfo (and PGCONNECT_TIMEOUT) may
  // override; keywords after it override what the expanded conninfo says. libpq ignores a
  // keyword whose value is null or empty.
  const char* connect_timeout =
      std::getenv("PGCONNECT_TIMEOUT") == nullptr ? kDefaultConnectTimeoutSeconds : nullptr;
  const char* keys[] = {"connect_timeout", "keepalives_idle", "keepalives_interval",
                        "keepalives_count", "dbname",  "fallback_application_name",
                        "replication", "options", "password", nullptr};
  const char* values[] = {connect_timeout, kDefaultKeepalivesIdleSeconds,
                          kDefaultKeepalivesIntervalSeconds, kDefaultKeepalivesCount,
                          conninfo.dsn.c_str(),
                          "walrelay",
                          replication,
                          options.empty() ? nullptr : options.c_str(),
                          conninfo.password.empty() ? nullptr : conninfo.password.c_str(),
                          nullptr};
  PgConnPtr conn(PQconnectdbParams(keys, values, /*expand_dbname=*/1));
  if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
    return StatusFromConnectFailure(conn.get(), context);
  }
  return conn;
}

}  // namespace walrelay::slot
