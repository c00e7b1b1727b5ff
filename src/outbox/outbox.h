// walrelay::outbox — the producer half: append an event to the transactional outbox INSIDE
// the caller's libpq transaction, so the event commits or rolls back with the business
// write. The helper never begins, commits or rolls back anything.
//
//   PQexec(conn, "BEGIN");
//   PQexec(conn, "INSERT INTO payments ...");
//   outbox::OutboxEvent e;
//   e.aggregate_type = "payment"; e.aggregate_id = "wallet-42"; e.event_type = "PaymentMade";
//   e.payload = R"({"amount": 1200, "currency": "EUR"})";
//   e.headers = {{"trace_id", "4bf92f..."}};
//   outbox::OutboxWriter writer;                       // public.outbox, documented columns
//   if (Status st = writer.Append(conn, e); !st.ok()) { PQexec(conn, "ROLLBACK"); ... }
//   PQexec(conn, "COMMIT");
//
// Two paths, both read by `walrelay run`:
//   Append()         INSERT into the outbox table (table and column names configurable;
//                    defaults match src/relay/core/schema.h and relay::OutboxColumns); with
//                    OutboxTarget::delete_in_same_transaction, then DELETE of that row.
//   AppendMessage()  no table: SELECT pg_logical_emit_message(true, prefix, envelope) with
//                    the JSON envelope {"event_id", "aggregate_type", "aggregate_id",
//                    "topic", "event_type", "payload", "headers"} that
//                    relay::OutboxMapper::MapMessage reads (prefix default
//                    "walrelay.outbox" = the relay's source.message_prefix). Nothing is
//                    stored in a table, so nothing needs deleting later; but after a lost
//                    slot such events cannot be republished (see docs/operations.md).
//
// Values travel as PQexecParams parameters (text format), never spliced into SQL; the
// table and column names are quoted identifiers.
//
// JSON validation: the helper does NOT parse the payload. PostgreSQL does: the table path
// stores it into the jsonb payload column, and the message path builds the envelope
// from parameters with jsonb_build_object (payload parsed on its own as $7::jsonb, so it
// cannot inject envelope fields), so invalid JSON (or invalid UTF-8, or "\u0000") fails the
// statement with a 22xxx SQLSTATE, reported as kInvalidArgument — and, as with any failed
// statement, the caller's transaction is then aborted and must be rolled back. Payloads
// are stored in jsonb form (keys re-ordered, whitespace normalised, duplicate keys
// collapsed to the last): that form is what reaches Kafka either way.
//
// Headers are a map of strings, written as a JSON object (escaped by JsonQuote below);
// an empty map stores NULL in the table (the relay treats NULL and {} alike) and {} in an
// envelope.
//
// Transaction check: Append/AppendMessage refuse a connection that is not inside an open
// transaction block (PQtransactionStatus != PQTRANS_INTRANS: kFailedPrecondition) — an
// event written in autocommit would not be atomic with anything.
//
// Event ids: empty OutboxEvent::event_id means "generate one" with NewUuidV7().
//
// Thread safety: OutboxWriter is immutable after construction and may be shared; a PGconn
// is used by one thread at a time (libpq's rule). NewUuidV7() is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "base/json.h"
#include "base/status.h"
#include "src/relay/core/config.h"

typedef struct pg_conn PGconn;

namespace walrelay::outbox {

// ---------------------------------------------------------------------------------------
// UUIDv7 (RFC 9562 §5.7): 48-bit big-endian Unix time in milliseconds, version 0b0111,
// 12 bits rand_a, variant 0b10, 62 bits rand_b. Random bits come from getrandom(2) (the
// kernel CSPRNG), read in blocks.
//
// Monotonicity (RFC 9562 §6.2, method 2 "monotonic random"): within one process, every id
// is strictly greater (bytewise, hence also as text and as PostgreSQL uuid) than the one
// before it. When the clock gives the same millisecond as the previous id — or an earlier
// one (clock stepped back) — the previous id's 74 random bits (rand_a:rand_b as one
// counter) are incremented by a random amount in [1, 2^32] and the previous timestamp is
// kept; if that overflows the 74 bits, the timestamp is advanced by 1 ms and the random
// bits are drawn afresh. So ids stay unique and ordered at any rate, and the embedded
// time never runs more than a few ms ahead of the clock in practice. Not guaranteed:
// ordering ACROSS processes or hosts (ids of the same millisecond from two processes
// interleave randomly) — the relay never relies on event-id order; Kafka order comes
// from commit order and the partition key.
//
// A forked child starts a fresh generator state and discards buffered random bytes
// (pthread_atfork), so parent and child never share bits.
// ---------------------------------------------------------------------------------------

using UuidBytes = std::array<uint8_t, 16>;

// A new UUIDv7 in canonical text form: 36 lowercase characters, 8-4-4-4-12.
std::string NewUuidV7();
// The same, as the 16 bytes in network order.
UuidBytes NewUuidV7Bytes();
// Canonical text form of 16 bytes.
std::string FormatUuid(const UuidBytes& bytes);

// The generator behind NewUuidV7, with an explicit clock for tests. Not thread-safe by
// itself (NewUuidV7 guards the process-wide instance with a mutex).
class UuidV7Generator {
 public:
  // `unix_ms` is the current time; returns the next id (monotonic as described above).
  UuidBytes Next(uint64_t unix_ms);
  // Forget the previous id and the random-byte buffer (used after fork()).
  void Reset();

 private:
  void FillRandom(uint8_t* out, size_t n);

  uint64_t last_ms_ = 0;
  uint64_t last_rand_hi_ = 0;  // 10 high bits of the 74-bit counter (rand_a's top)
  uint64_t last_rand_lo_ = 0;  // 64 low bits
  bool have_last_ = false;
  std::array<uint8_t, 256> pool_{};
  size_t pool_pos_ = 256;  // pool_ empty
};

// ---------------------------------------------------------------------------------------
// JSON string literal of `s` (base/json.h; PostgreSQL rejects invalid UTF-8 in a UTF8
// database).
using ::walrelay::JsonQuote;

// The caller's W3C trace context (https://www.w3.org/TR/trace-context/), e.g. from its
// tracer's propagator. Written as the row's headers `traceparent` and `tracestate`, so the
// record carries them unchanged and the consumer continues the trace (the inbox library:
// InboxMessage::traceparent()). Append refuses (kInvalidArgument) a traceparent that is
// not "<2 hex version>-<32 hex trace id>-<16 hex parent id>-<2 hex flags>" (lower-case
// hex, ids not all zero, version not ff; version 00 is exactly 55 characters), a
// tracestate longer than 512 characters or with characters outside printable ASCII, and
// an event whose headers already name either header.
struct TraceContext {
  std::string traceparent;  // required
  std::string tracestate;   // empty: no tracestate header
};

// kInvalidArgument with the reason when `trace` is not a W3C trace context (above).
Status CheckTraceContext(const TraceContext& trace);

// The event. Text fields must not contain NUL bytes (kInvalidArgument).
struct OutboxEvent {
  std::string event_id;              // empty: a new UUIDv7. The table's column is uuid by default,
                                     // so a caller-supplied id must then be a UUID.
  std::string aggregate_type;        // empty: NULL / omitted
  std::string aggregate_id;          // required: the Kafka key (per-aggregate order)
  std::optional<std::string> topic;  // nullopt: the relay's topic template decides
  std::string event_type;            // required
  std::string payload;               // required: JSON text (any JSON value)
  std::map<std::string, std::string> headers;  // extra Kafka headers
  std::optional<TraceContext> trace;           // the caller's trace context, if it has one
};

// Where Append() writes. Defaults: table public.outbox with the documented column names.
// An empty column name means the table has no such column (only aggregate_type, topic
// and headers may be absent); an event that sets a value for an absent column is
// rejected (kInvalidArgument) rather than silently losing it. id and created_at are
// never written (their defaults apply).
struct OutboxTarget {
  std::string table = "public.outbox";  // optionally schema-qualified
  relay::OutboxColumns columns;
  std::string message_prefix = "walrelay.outbox";  // AppendMessage()'s prefix
  // Cleanup design "same transaction" (relay outbox.cleanup same-transaction): Append()
  // deletes the row it inserted, in the same transaction. The WAL still carries the INSERT,
  // which the relay publishes; the table stays empty (no janitor, no bloat beyond what
  // autovacuum takes). The price: lost-slot recovery cannot republish such events.
  bool delete_in_same_transaction = false;
};

class OutboxWriter {
 public:
  OutboxWriter() : OutboxWriter(OutboxTarget{}) {}
  explicit OutboxWriter(OutboxTarget target);

  // INSERTs one outbox row in the caller's open transaction. On success `*event_id_out`
  // (when not null) receives the event id written. Errors:
  //   kInvalidArgument      missing required field, NUL byte, a value for an absent
  //                         column, or PostgreSQL rejected the data (22xxx/23xxx: bad
  //                         JSON, bad uuid, NOT NULL, ...)
  //   kFailedPrecondition   not inside an open transaction, the transaction is aborted, or
  //                         another server state an operator must fix
  //   kUnavailable          connection lost / server shutting down / 40001, 40P01, 53xxx
  //   kPermissionDenied     42501 (no INSERT privilege on the table)
  //   kInternal             the SQL or schema (42P01 no such table, 42703 no such column, ...)
  // Server errors are classified by slot/pg_error.h's SQLSTATE table (its fault column).
  // After any server error the caller's transaction is aborted: roll it back.
  Status Append(PGconn* conn, const OutboxEvent& event, std::string* event_id_out = nullptr) const;

  // Emits the event as a transactional logical message (no table); same errors.
  Status AppendMessage(PGconn* conn, const OutboxEvent& event,
                       std::string* event_id_out = nullptr) const;

  // The INSERT statement Append() runs, and the DELETE after it (empty unless
  // delete_in_same_transaction), for docs and tests.
  const std::string& insert_sql() const { return insert_sql_; }
  const std::string& delete_sql() const { return delete_sql_; }

 private:
  Status Check(PGconn* conn, const OutboxEvent& event, bool table_path) const;

  OutboxTarget target_;
  std::string insert_sql_;
  std::string delete_sql_;
};

// Convenience: the default target (public.outbox, documented columns / default prefix).
Status Append(PGconn* conn, const OutboxEvent& event, std::string* event_id_out = nullptr);
Status AppendMessage(PGconn* conn, const OutboxEvent& event, std::string* event_id_out = nullptr);

}  // namespace walrelay::outbox
