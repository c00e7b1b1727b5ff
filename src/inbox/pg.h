// Internal libpq helpers of the inbox library: parameterised statements and the mapping of
// PostgreSQL errors onto Status codes that say what the inbox does next.
//
//   40001 serialization failure, 40P01 deadlock, 08xxx connection, 57Pxx shutdown,
//   53xxx resources, 58xxx system, no SQLSTATE / connection lost   kUnavailable (retry)
//   22xxx data exception, 23xxx integrity violation                kInvalidArgument
//                                                                  (this message's data
//                                                                  cannot be stored)
//   anything else (42xxx undefined table, privileges, XX000, ...)  kInternal (a bug or an
//                                                                  operator fix; retried,
//                                                                  loudly, never skipped)
//
// Thread safety: reentrant; a PGconn is used by one thread at a time.
#pragma once

#include <libpq-fe.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace walrelay::inbox::pg {

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

// A bound parameter: nullopt data is NULL; binary=true sends the bytes as bytea.
struct RawParam {
  std::optional<std::string_view> data;
  bool binary = false;
};

Status MapError(PGconn* conn, const PGresult* res, std::string_view context);

// Runs `sql` with parameters; OK when the result is COMMAND_OK or TUPLES_OK.
Result<ResultPtr> Exec(PGconn* conn, std::string_view sql, std::span<const RawParam> params,
                       std::string_view context);

// Runs a parameterless command (simple query protocol; several statements allowed).
Status Command(PGconn* conn, std::string_view sql, std::string_view context);

// COMMIT, verifying the server really committed: COMMIT of a transaction that an earlier
// error aborted answers "ROLLBACK" with COMMAND_OK, which is reported as kInternal here.
Status Commit(PGconn* conn);

// ROLLBACK, ignoring failures (the connection is then broken and gets replaced).
void Rollback(PGconn* conn);

// Connects; kUnavailable on failure.
Result<PGconn*> Connect(const std::string& conninfo);

}  // namespace walrelay::inbox::pg
