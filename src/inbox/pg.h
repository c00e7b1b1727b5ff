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

#include <chrono>
#include <optional>
#include <span>
#include <vector>
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

// Statements sent without waiting for their results (libpq pipeline mode), on one
// connection inside an open transaction. Each is tagged with an owner: the position in
// the batch of the message whose handler sent it, so a failure is blamed on the message
// that caused it. The connection stays in pipeline mode from the first Send to the next
// Drain; nothing else may use it in between. Not thread-safe.
//
// libpq reads the server's answers while it waits to send (pqSendSome), so a long
// pipeline cannot deadlock on full socket buffers; Send drains by itself every
// kMaxPending statements to bound the memory of unread answers. On a connection from
// Connect(), each distinct statement text is prepared once per connection (up to 64 of
// them; more are sent unnamed): handlers must not DEALLOCATE or DISCARD ALL.
class Pipeline {
 public:
  static constexpr int kMaxPending = 1000;

  struct Failure {
    Status status;
    slot::PgFault fault = slot::PgFault::kTransient;
    size_t owner = 0;
  };

  explicit Pipeline(PGconn* conn) : conn_(conn) {}
  // Drains what is still pending (the results are dropped: the transaction is being
  // abandoned or has failed).
  ~Pipeline() { (void)Drain(); }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Queues `sql`. An error only when it cannot be sent (the connection is gone); a
  // statement that fails on the server is reported by Drain.
  Status Send(std::string_view sql, std::span<const RawParam> params, size_t owner);

  // Waits for every queued statement and leaves pipeline mode. Returns the first failure
  // since the pipeline was created (sticky: a failed transaction stays failed), or
  // nullopt. After a failure the statements behind it were skipped by the server and
  // the transaction is aborted: the caller rolls back.
  const std::optional<Failure>& Drain();

  // The first failure seen so far, without waiting.
  const std::optional<Failure>& failure() const { return failure_; }

 private:
  // A statement (or the Prepare of one) whose result is unread.
  struct Sent {
    size_t owner = 0;
    std::string prepared;  // for a Prepare: its SQL (forgotten when the Prepare fails)
  };

  PGconn* conn_;
  bool active_ = false;
  std::vector<Sent> sent_;
  std::optional<Failure> failure_;
};

// Connects (slot::ConnectPg, replication off); NOTICEs are dropped. The caller owns the
// connection (PQfinish). `statement_timeout` (0: the server's own) is sent as the session's
// statement_timeout, and every wait of this file's functions for an answer on the
// connection is bounded by it plus slot::kClientWaitGrace (slot::ClientWaitBound): past
// it the statement fails kUnavailable with fault kTransient and the connection is shut
// down (a half-open path to the server, where neither the server's timeout nor TCP
// keepalives answered by a proxy end the wait). 0 leaves the waits unbounded.
Result<PGconn*> Connect(const slot::ConnInfo& conninfo, std::chrono::milliseconds statement_timeout);

}  // namespace walrelay::inbox::pg
