// Internal libpq helpers of the inbox library: statements with binary (bytea) parameters,
// and a COMMIT that detects a rolled-back transaction. They add no error mapping of their
// own: every failure is mapped by the shared SQLSTATE table (slot/pg_error.h), which gives
// the Status and the fault the inbox acts on:
//
//   fault kTransient, kServerState   retry the message with backoff (Stats::retries)
//   fault kData                      dead-letter the message (22xxx, 23xxx, 54xxx)
//   fault kStatement                 stop the consumer: Run() returns the error (42xxx, 0A)
//
// Thread safety: reentrant; a PGconn is used by one thread at a time.
#pragma once

#include <libpq-fe.h>

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "slot/pg_error.h"

namespace walrelay::inbox::pg {

using ResultPtr = slot::PgResultPtr;

// A bound parameter: nullopt data is NULL; binary=true sends the bytes as bytea. Text
// parameters must not contain NUL (libpq ends them there): callers validate first.
struct RawParam {
  std::optional<std::string_view> data;
  bool binary = false;
};

// Runs `sql` with parameters; OK when the result is COMMAND_OK or TUPLES_OK. On failure
// `*fault` (REQUIRES: non-null) is the shared table's fault.
Result<ResultPtr> Exec(PGconn* conn, std::string_view sql, std::span<const RawParam> params,
                       std::string_view context, slot::PgFault* fault);

// Runs a parameterless command (simple query protocol; several statements allowed).
Status Command(PGconn* conn, std::string_view sql, std::string_view context, slot::PgFault* fault);

// COMMIT, verifying the server really committed: COMMIT of a transaction that an earlier
// error aborted answers "ROLLBACK" with COMMAND_OK, which is reported as kInternal with
// fault kServerState here (the caller knows the earlier error, if it saw it).
Status Commit(PGconn* conn, slot::PgFault* fault);

// ROLLBACK, ignoring failures (the connection is then broken and gets replaced).
void Rollback(PGconn* conn);

// Connects (slot::ConnectPg, replication off); NOTICEs are dropped. The caller owns the
// connection (PQfinish).
Result<PGconn*> Connect(const std::string& conninfo);

}  // namespace walrelay::inbox::pg
