// Where libpq errors enter walrelay: SQLSTATEs and connection failures mapped onto
// Status codes that tell the caller what to do, with a message naming the fix.
//
//   55006 object in use (slot active elsewhere)    kFailedPrecondition
//   42501 insufficient privilege                   kPermissionDenied (+ ALTER ROLE ... REPLICATION)
//   42704 undefined object (slot, publication)     kNotFound
//   42710 duplicate object                         kAlreadyExists
//   55000 with "wal_level" in the message          kFailedPrecondition (+ set wal_level=logical)
//   53400 configuration limit (slots, senders)     kResourceExhausted
//   08xxx, 57Pxx, 53xxx, 40xxx, 58xxx, XXxxx, none kUnavailable (retry)
//   42xxx, 22xxx (other)                           kInvalidArgument
//   anything else                                  kFailedPrecondition
//
// Thread safety: functions are reentrant; a PGconn must not be used by two threads.
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace walrelay::slot {

struct PgConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct PgResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgConnPtr = std::unique_ptr<PGconn, PgConnDeleter>;
using PgResultPtr = std::unique_ptr<PGresult, PgResultDeleter>;

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

// How long ExecPg waits for the server on `conn`: the statement_timeout ConnectPg sent
// (SessionSettings) plus kClientWaitGrace; 0 (unbounded) without one.
inline constexpr std::chrono::milliseconds kClientWaitGrace{5000};
std::chrono::milliseconds ClientWaitBound(PGconn* conn);

// Runs `create_ddl` (CREATE TABLE ...) unless `table` exists. `table` is a name as SQL
// writes it ("schema"."name", quoted as needed), resolved by to_regclass. Checking first
// matters for a least-privilege role: CREATE TABLE IF NOT EXISTS checks CREATE on the
// schema before it looks for the table, and fails for a role that may only use it.
Status CreateTableIfMissing(PGconn* conn, const std::string& table, const std::string& create_ddl,
                            std::string_view context);

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
// "-c" per setting, so ours win over the user's for these two settings only.
// kInvalidArgument when `conninfo` does not parse.
Result<std::string> SessionOptions(std::string_view conninfo, const SessionSettings& settings);

// Connects with `conninfo` (keyword/value or URI) and `replication` forced to the given
// value ("database" or "false"; nullptr = as `conninfo` says); application_name defaults to
// "walrelay". `settings` are applied as SessionOptions describes (none by default).
Result<PgConnPtr> ConnectPg(std::string_view conninfo, const char* replication,
                            std::string_view context, const SessionSettings& settings = {});

}  // namespace walrelay::slot
