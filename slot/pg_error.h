// Where libpq errors enter walrelay: SQLSTATEs and connection failures mapped onto
// Status codes that tell the caller what to do, with a message naming the fix.
//
// THE SQLSTATE table (the only one in the tree; the relay and the inbox both use it).
// First matching row wins: exact codes, then classes, then the default.
//
//   SQLSTATE        meaning                          Status code          fault
//   55006           object in use (slot active)      kFailedPrecondition  kTransient
//   55P03           lock not available               kFailedPrecondition  kTransient
//   55000           object not in prereq. state      kFailedPrecondition  kServerState
//                   ("wal_level": + set wal_level=logical and restart)
//   53400           configuration limit exceeded     kResourceExhausted   kServerState
//   42501           insufficient privilege           kPermissionDenied    kStatement
//   42704           undefined object                 kNotFound            kStatement
//   42710           duplicate object                 kAlreadyExists       kStatement
//   08xxx           connection exception             kUnavailable         kTransient
//   40xxx           serialization failure, deadlock  kUnavailable         kTransient
//   53xxx           insufficient resources           kUnavailable         kTransient
//   57xxx           operator intervention, shutdown  kUnavailable         kTransient
//   58xxx           system error (I/O)               kUnavailable         kTransient
//   XXxxx           internal error                   kUnavailable         kTransient
//   (none)          client side: connection lost     kUnavailable         kTransient
//   22xxx           data exception                   kInvalidArgument     kData
//   23xxx           integrity constraint violation   kFailedPrecondition  kData
//   54xxx           program limit exceeded           kResourceExhausted   kData
//   42xxx           syntax error or access rule      kInvalidArgument     kStatement
//   0Axxx           feature not supported            kFailedPrecondition  kStatement
//   anything else                                    kFailedPrecondition  kServerState
//
// A failed statement on a connection that is gone (PQstatus != CONNECTION_OK) is
// kUnavailable / kTransient whatever its SQLSTATE. The Status code is what the relay acts
// on (src/relay/run/relay.cc Retryable: restart or exit); the fault is what the inbox acts on
// (transient and server state: retry with backoff; data: dead-letter the message;
// statement: stop the consumer); docs/operations.md ("Database errors") says the same.
//
// Thread safety: functions are reentrant; a PGconn must not be used by two threads.
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "slot/conninfo.h"

namespace walrelay::slot {

struct PgConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct PgResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgConnPtr = std::unique_ptr<PGconn, PgConnDeleter>;
using PgResultPtr = std::unique_ptr<PGresult, PgResultDeleter>;

// What a failed statement says about its cause (the table's last column).
enum class PgFault {
  kTransient,    // the connection or the server right now: the same statement may succeed
  kServerState,  // server or session state that an operator may have to fix first
  kData,         // the values of this statement cannot be stored as given
  kStatement,    // the SQL, the schema or the privileges: every statement like it fails
};

std::string_view PgFaultName(PgFault fault);

// One row of the table above.
struct SqlStateRule {
  std::string_view sqlstate;  // 5 characters: that code; 2: its class; "": no SQLSTATE
  StatusCode code;
  PgFault fault;
  std::string_view meaning;
};

// The table, in match order (without the default row).
std::span<const SqlStateRule> SqlStateTable();

// The row for `sqlstate` (empty: a client-side failure); the default row when none
// matches.
const SqlStateRule& ClassifySqlState(std::string_view sqlstate);

// A failed statement: the mapped Status (as StatusFromResult) and the table's fault.
struct PgFailure {
  Status status;
  PgFault fault = PgFault::kTransient;
};

// Maps a failed PGresult (or null result) of `conn`, including the lost-connection rule.
PgFailure FailureFromResult(PGconn* conn, const PGresult* res, std::string_view context);

// Maps a server error. `sqlstate` may be empty (client-side failure: connection lost).
// `role` names the role for the privilege fix. `context` says what was being done
// ("START_REPLICATION SLOT s"); the message is "<context>: <server message>; <what to do>".
Status MapPgError(std::string_view sqlstate, std::string_view server_message, std::string_view role,
                  std::string_view context);

// Maps a failed PGresult (or null result) of `conn`.
Status StatusFromResult(PGconn* conn, const PGresult* res, std::string_view context);

// Maps a failed PQconnectdb*: the server's rejections by their (English) text,
// everything else kUnavailable.
Status StatusFromConnectFailure(PGconn* conn, std::string_view context);

// Runs `sql` on `conn` with text parameters (nullptr = SQL NULL). OK for a command or
// tuples result; otherwise the mapped error (StatusFromResult), kUnavailable when the
// connection itself is gone. On a connection with a statement_timeout from ConnectPg's
// SessionSettings the wait for the answer is bounded too (ClientWaitBound): a server that
// never answers (a half-open connection, where statement_timeout cannot help) gives
// kUnavailable and the connection is shut down (CONNECTION_BAD from then on).
Result<PgResultPtr> ExecPg(PGconn* conn, const std::string& sql,
                           const std::vector<const char*>& params, std::string_view context);

// Long waits for the server, made visible. While ExecPg (or a replication command,
// ReplicationConnection) waits for an answer, the calling thread's observer, if any, is
// called about once a second with what is awaited (the statement's context) and for how
// long, and once more with `ended` when such a wait is over: a slot's creation waiting for the transactions open on the server, a backfill's
// count(*) or first FETCH on a large outbox. The relay's observer advances its liveness
// (the systemd watchdog), says in STATUS and the log what it waits for, and lets a stop
// interrupt nothing but the wait. Set for a scope; nested scopes restore the outer one.
using ServerWaitObserver =
    std::function<void(std::string_view what, std::chrono::milliseconds waited, bool ended)>;
class ScopedServerWaitObserver {
 public:
  explicit ScopedServerWaitObserver(ServerWaitObserver observer);
  ~ScopedServerWaitObserver();
  ScopedServerWaitObserver(const ScopedServerWaitObserver&) = delete;
  ScopedServerWaitObserver& operator=(const ScopedServerWaitObserver&) = delete;

 private:
  ServerWaitObserver previous_;
};

// Sends `sql` (PQsendQueryParams with `params`; `simple`: PQsendQuery, for replication
// commands, which take only the simple protocol) and waits for its results in slices of a
// second, telling the thread's ServerWaitObserver; `bound` (0: none) as ExecPg's. Returns
// the first error result, else the last one (a COPY result at once); null when sending or
// reading failed (the caller maps the connection's error); kUnavailable past the bound.
Result<PgResultPtr> SendAndAwait(PGconn* conn, const std::string& sql,
                                 const std::vector<const char*>& params, bool simple,
                                 std::string_view context, std::chrono::milliseconds bound);

// The results of what was sent on `conn` (PQsend*), awaited as SendAndAwait awaits them:
// SendAndAwait without the sending, for callers that send with binary parameters.
Result<PgResultPtr> AwaitResults(PGconn* conn, std::string_view context,
                                 std::chrono::milliseconds bound);

// One PQgetResult of what was sent on `conn` (a pipeline's results one by one), waiting
// as SendAndAwait does until `bound` (0: none) after `start`: null at the end of a
// statement's results, and when reading failed (the caller maps the connection's error);
// kUnavailable past the bound, the connection shut down.
Result<PgResultPtr> AwaitResult(PGconn* conn, std::string_view context,
                                std::chrono::steady_clock::time_point start,
                                std::chrono::milliseconds bound);

// How long ExecPg waits for the server on `conn`: the statement_timeout ConnectPg sent
// (SessionSettings) plus kClientWaitGrace; 0 (unbounded) without one.
inline constexpr std::chrono::milliseconds kClientWaitGrace{5000};
std::chrono::milliseconds ClientWaitBound(PGconn* conn);

// Runs `create_ddl` (CREATE TABLE ...) unless `table` exists; a CREATE that fails because
// another session created the table meanwhile is success. `table` is a name as SQL
// writes it ("schema"."name", quoted as needed), resolved by to_regclass. Checking first
// matters for a least-privilege role: CREATE TABLE IF NOT EXISTS checks CREATE on the
// schema before it looks for the table, and fails for a role that may only use it.
Status CreateTableIfMissing(PGconn* conn, const std::string& table, const std::string& create_ddl,
                            std::string_view context);

// True when the connected role may replicate as far as the catalog tells: REPLICATION,
// superuser, or (Amazon RDS and Aurora) membership in rds_replication. A hint for mapping
// a refused replication connection only: whether replication works is found by trying it.
inline constexpr const char* kMayReplicateSql =
    "SELECT rolreplication OR rolsuper OR CASE WHEN to_regrole('rds_replication') IS NULL "
    "THEN false ELSE pg_has_role(current_user, 'rds_replication', 'MEMBER') END FROM pg_roles "
    "WHERE rolname = current_user";

// Server settings for a session, sent in the startup packet (libpq `options`, "-c name=value").
struct SessionSettings {
  // synchronous_commit = local: a COMMIT waits for the local WAL flush only, never for a
  // synchronous standby. The relay's own walsender can be one (synchronous_standby_names
  // = '*' matches every walsender): a write on the streaming thread that waited for it
  // would wait for the relay itself, forever.
  bool local_commit = false;
  // statement_timeout; 0 = the server's (role, database or postgresql.conf) setting.
  std::chrono::milliseconds statement_timeout{0};
};

// The relay's SQL connections that write while it streams (dead letters, progress,
// heartbeats, publication and table creation): local commits, and no statement may hold
// the streaming thread longer than 30 s (a timeout is 57014, kUnavailable: the session
// restarts from the slot).
inline constexpr SessionSettings kRelaySession{.local_commit = true,
                                               .statement_timeout = std::chrono::seconds(30)};

// The libpq `options` value that applies `settings` on top of what the user asked for:
// the conninfo's own `options` (else $PGOPTIONS, which libpq would have used), then one
// "-c" per setting, so ours win over the user's for these settings only. Always
// standard_conforming_strings=on: base/sql.h quotes literals for it, and a role, database or
// server default of off would change what a quoted name or value means.
// kInvalidArgument when `conninfo` does not parse.
Result<std::string> SessionOptions(std::string_view conninfo, const SessionSettings& settings);

// Whether the connection to the source can be read or altered on the network: a warning
// when it reaches a server that is not on this host (not a unix socket, not localhost /
// 127.0.0.0/8 / ::1) without verified TLS: TLS off, or an sslmode below verify-full
// (require and verify-ca do not check that the certificate names the host). "" when the
// transport is fine. `host` is PQhost() of the live connection, `sslmode` the effective one
// (PQconninfo: the conninfo's, else $PGSSLMODE, else prefer).
std::string TransportSecurityWarning(std::string_view host, std::string_view port,
                                     bool ssl_in_use, std::string_view sslmode);
// The same for a live connection.
std::string TransportSecurityWarning(PGconn* conn);

// Defaults for every connection to the source, each overridable in the conninfo (libpq's
// keywords; connect_timeout also by PGCONNECT_TIMEOUT). A connection attempt into a
// network black hole (packets dropped, or a proxy that accepts and then forwards nothing)
// gives up after connect_timeout instead of waiting forever (libpq's default), so the
// relay's session loop keeps retrying and saying so; TCP keepalives end a connection whose
// peer vanished within idle + interval * count (about 90 s) instead of the kernel's 2 h
// (docs/operations.md, "network faults").
inline constexpr const char* kDefaultConnectTimeoutSeconds = "10";
inline constexpr const char* kDefaultKeepalivesIdleSeconds = "60";
inline constexpr const char* kDefaultKeepalivesIntervalSeconds = "10";
inline constexpr const char* kDefaultKeepalivesCount = "3";

// Connects with `conninfo` (its DSN expanded by libpq, then the password keyword) and
// `replication` forced to the given value ("database" or "false"; nullptr = as the DSN
// says); application_name defaults to "walrelay". `settings` are applied as SessionOptions
// describes, standard_conforming_strings=on on every connection. No connection string is ever built by concatenation.
Result<PgConnPtr> ConnectPg(const ConnInfo& conninfo, const char* replication,
                            std::string_view context, const SessionSettings& settings = {});

}  // namespace walrelay::slot
