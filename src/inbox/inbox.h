// Inbox: the consumer half of walrelay. Turns at-least-once Kafka delivery into
// effectively-once processing by deduplicating on the producer-side event id in the same
// PostgreSQL transaction as the service's side effect. See docs/inbox.md.
//
// Per batch (one partition's messages strictly in offset order; a batch is what is
// queued for the partition, up to batch_max_messages):
//   event id  = the first header named event_id_header (`event_id` by default: every
//               walrelay record has one; `id` for records in Debezium's form; empty →
//               poison), else the "event_id" member of the JSON value (records other
//               producers wrote in walrelay's envelope form); neither → poison,
//               dead-lettered alone.
//   BEGIN
//   INSERT INTO inbox (consumer, message_id) SELECT $1, unnest($2) ON CONFLICT DO NOTHING
//     RETURNING message_id
//     not returned → duplicate: nothing else written, counted in Stats::duplicates
//     returned     → handler(message, transaction) in the same transaction, in order
//   the handlers' deferred statements (Transaction::Defer), then COMMIT
//   then rd_kafka_offsets_store(last offset + 1)
// Batches:
// A batch never decides the fate of a message: any failure rolls the batch back; the
// messages before the one it belongs to run again as one batch, and that one runs alone
// (a batch of one), where the rules below apply to it exactly as without batching.
// The offset commit: enable.auto.commit=true with enable.auto.offset.store=false (forced).
// librdkafka commits only *stored* offsets, and an offset is stored only after its
// database transaction committed, so a committed offset never passes an unapplied
// message. Stored offsets are also committed synchronously when partitions are revoked
// and on shutdown. A crash between COMMIT and the offset commit redelivers; the inbox row
// absorbs the redelivery.
//
// Handler results:
//   OK                                          commit, move on
//   kInvalidArgument, kFailedPrecondition,
//   kDataLoss (permanent: the message is bad)   roll back; dead-letter (topic + table,
//                                               inbox row kept so a redelivery is a
//                                               duplicate); move on
//   anything else (kUnavailable, kCancelled     roll back; retry with capped backoff;
//   while no stop was requested, ...)           the partition waits, nothing is skipped
// Only a stop ends a partition's worker: Stop(), a revoke, or the whole consumer stopping
// on a statement fault (below).
// Database errors (the inbox's own statements, and the handler's when it returns while
// its transaction is aborted by one) are decided by the shared SQLSTATE table
// (slot/pg_error.h) instead: transient or server-state faults (08, 40, 53, 57, 58, XX,
// 55P03, lost connection, ...) are retried; data faults (22, 23, 54) dead-letter the
// message; statement faults (42, 0A: schema, privileges, SQL) stop the consumer: Run()
// returns the error.
//
// Events older than the inbox retention: a record whose walrelay.position header carries
// an event time (commit_time_us; on records `walrelay republish` or lost-slot recovery
// re-emitted, the row's created_at) older than inbox_retention is dead-lettered with the
// reason, not applied: its inbox row may be deleted already, so the inbox can no longer
// tell whether it applied it (a ledger credited twice otherwise). Records without the
// header or a time are judged by their event id alone.
//
// Event ids: at most kMaxEventIdBytes bytes of UTF-8 without NUL; any other id makes the
// message poison (dead-lettered without an inbox row). A poison message is dead-lettered
// once: a redelivery finds its dead-letter row (same consumer, topic, partition, offset,
// key and value) and is counted as a duplicate.
//
// Threading: one thread calls Run(); it serves the consumer group (rebalances) and starts
// one worker thread per assigned partition. Workers share a pool of
// `max_db_connections` connections (a partition holds one only while it processes a
// message, not while it backs off). The handler is therefore called concurrently for
// different partitions and must be thread-safe; for one partition calls are sequential.
// Stop() and stats() may be called from any thread. A retention thread runs beside them
// on its own connection.
//
// Ownership: the InboxMessage and its views are valid only during the handler call; the
// Transaction likewise (do not keep it, do not COMMIT/ROLLBACK through it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/headers.h"
#include "base/status.h"

typedef struct pg_conn PGconn;
typedef struct rd_kafka_s rd_kafka_t;

namespace walrelay::inbox {

namespace pg {
class Pipeline;
}  // namespace pg

// The longest event id accepted as an inbox key, in bytes (a btree entry holds ~2.7 kB
// for consumer and id together).
inline constexpr size_t kMaxEventIdBytes = 1024;

// One consumed Kafka record. Views into librdkafka's message: valid during the call only.
struct InboxMessage {
  std::string_view topic;
  int32_t partition = -1;
  int64_t offset = -1;
  std::string_view key;    // aggregate_id for walrelay records; empty when null
  std::string_view value;  // payload
  std::vector<std::pair<std::string_view, std::string_view>> headers;
  // The dedup key: also the idempotency key to hand to external systems (payment
  // providers, mail APIs): the inbox cannot roll back their effects, see docs/inbox.md.
  std::string_view event_id;

  // The first header named `name`, or nullopt.
  std::optional<std::string_view> Header(std::string_view name) const;
  // The writer's W3C trace context (outbox::OutboxEvent::trace, or `traceparent` and
  // `tracestate` in the row's headers column), unchanged; empty when the record has none.
  // Give both to your tracer's propagator to continue the writer's trace in the handler.
  std::string_view traceparent() const { return Header(headers::kTraceparent).value_or(""); }
  std::string_view tracestate() const { return Header(headers::kTracestate).value_or(""); }
};

// The CloudEvent a record carries (CloudEvents 1.0, Kafka protocol binding; the relay's
// outbox.format cloudevents-binary or cloudevents-structured). Binary mode: the ce_*
// headers and the value as data. Structured mode (content-type
// application/cloudevents+json): the value's members, `data` as its JSON text, or the
// bytes of `data_base64`. Attributes a record does not carry are empty.
struct CloudEvent {
  std::string specversion, id, source, type;  // required by the spec
  std::string time, datacontenttype, subject;
  std::string data;
};

// nullopt when `message` is not a CloudEvent (no ce_specversion header, and no
// application/cloudevents+json content type); kInvalidArgument with the reason when it
// claims to be one but a required attribute is missing or empty, specversion is not 1.x,
// or a structured value is not a JSON object (a handler may dead-letter it with that).
Result<std::optional<CloudEvent>> ReadCloudEvent(const InboxMessage& message);

// A query parameter in text form; nullopt is SQL NULL.
struct Param {
  Param(std::nullopt_t) {}                              // NOLINT: implicit
  Param(std::string_view v) : value(std::string(v)) {}  // NOLINT: implicit
  Param(const std::string& v) : value(v) {}             // NOLINT: implicit
  Param(const char* v) : value(std::string(v)) {}       // NOLINT: implicit
  Param(int64_t v) : value(std::to_string(v)) {}        // NOLINT: implicit
  Param(int v) : value(std::to_string(v)) {}            // NOLINT: implicit
  std::optional<std::string> value;
};

using Row = std::vector<std::optional<std::string>>;

// The open transaction (inside BEGIN) in which the inbox row was inserted. The handler's
// writes commit or roll back together with that row. Not thread-safe; valid during the
// handler call only. Do not issue COMMIT/ROLLBACK/BEGIN through it.
class Transaction {
 public:
  explicit Transaction(PGconn* conn) : conn_(conn) {}

  // Runs one statement with $1.. parameters; returns the affected row count. Waits for
  // every Defer()red statement first (one round trip); a failure of one of those is
  // returned here.
  Result<int64_t> Exec(std::string_view sql, const std::vector<Param>& params = {});
  // Runs a query; all rows as text (nullopt for NULL). Waits for deferred statements
  // like Exec.
  Result<std::vector<Row>> Query(std::string_view sql, const std::vector<Param>& params = {});

  // Sends one statement without waiting for its result (libpq pipeline mode): for writes
  // whose row count the handler does not need, and the way to keep up with the relay
  // (no round trip per statement; a batch of messages shares one). Its result is checked
  // before the transaction commits; a failure counts exactly as if Exec had returned it
  // to this message's handler: the shared SQLSTATE table retries, dead-letters or stops
  // (docs/inbox.md). Returns an error only when the statement cannot be sent. Use it for
  // statements that return no rows (their answers are read only at the end).
  Status Defer(std::string_view sql, const std::vector<Param>& params = {});

  // The connection, for libpq features not wrapped here. Same rules as above.
  PGconn* connection() const { return conn_; }

  // The last failure of Exec/Query (OK when none failed). When the handler returns an
  // error while this transaction is aborted by it (or the connection is gone), the shared
  // SQLSTATE table decides what happens, not the returned code (docs/inbox.md).
  const Status& last_database_error() const { return last_error_; }

 private:
  friend struct TransactionAccess;
  // Waits for the deferred statements; their first failure, recorded, or OK.
  Status WaitDeferred();

  PGconn* conn_;
  pg::Pipeline* pipeline_ = nullptr;  // set by the consumer; null: Defer runs Exec
  size_t owner_ = 0;                  // this message's position in its batch
  Status last_error_;
  int last_fault_ = 0;  // slot::PgFault of last_error_
};

using Handler = std::function<Status(const InboxMessage&, Transaction&)>;

// InboxOptions::max_relay_lag's default (CheckInboxRetention).
inline constexpr std::chrono::milliseconds kDefaultMaxRelayLag{12LL * 3600 * 1000};

struct InboxOptions {
  // Kafka. bootstrap, group and at least one topic are required. `properties` are any
  // librdkafka properties applied over ours (session.timeout.ms, ...); setting
  // enable.auto.offset.store=true is refused (kInvalidArgument).
  std::string bootstrap_servers;
  std::string group_id;
  std::vector<std::string> topics;
  std::vector<std::pair<std::string, std::string>> properties;

  // PostgreSQL (keyword/value or URI conninfo) and the logical consumer name: the first
  // half of the inbox key, so two services reading the same topic dedup independently,
  // and two processes of one service (any group) dedup against each other. The consumer
  // name follows the event-id rules (UTF-8, no NUL, at most kMaxEventIdBytes), else
  // Create() returns kInvalidArgument. `password` (e.g. from slot::ReadPasswordFile) stays
  // apart from `conninfo` and reaches libpq as its own keyword, overriding one in the
  // conninfo; empty = as the conninfo, PGPASSWORD or ~/.pgpass say.
  std::string conninfo;
  std::string password;
  std::string consumer_name;
  int max_db_connections = 4;
  // Sent as every inbox connection's statement_timeout (0: the server's own setting), and
  // the bound on each wait for the database's answer: this plus 5 s. A statement past it
  // fails as transient (the message is retried with backoff, on a new connection); so
  // does an answer that never comes, as behind a half-open connection (a proxy or a
  // firewall that drops the flow silently), where the server's timeout cannot help and
  // TCP keepalives can be answered by the proxy. 0 leaves those waits unbounded: a worker
  // can then wait for ever with its partitions stalled. Handlers' statements must finish
  // within it.
  std::chrono::milliseconds statement_timeout{60'000};

  // The Kafka header that carries the event id: the relay's outbox.headers event_id name
  // (`id` under its Debezium profile, as Debezium's Outbox Event Router writes it).
  std::string event_id_header{headers::kEventId};

  // Dead letters: the Kafka topic (empty: "<consumer_name>.dlq") and a row in
  // `inbox_dead_letter`.
  std::string dead_letter_topic;
  std::chrono::milliseconds dead_letter_timeout{30'000};

  // Batches (per partition): at most batch_max_messages records share one database
  // transaction; after the first record, a worker waits at most batch_max_wait for more
  // (0: takes only what is already queued, so a quiet partition adds no latency). 1 turns
  // batching off. Batching never changes what is applied: see "Batches" above.
  int batch_max_messages = 500;
  std::chrono::milliseconds batch_max_wait{0};

  // Transient failures: backoff from initial, doubling, capped at max.
  std::chrono::milliseconds retry_initial_backoff{100};
  std::chrono::milliseconds retry_max_backoff{10'000};

  // Retention of inbox rows. Zero keeps rows forever (no retention task). Otherwise it
  // must be longer than the topic's replay window (checked at Create, see
  // CheckInboxRetention), and rows older than this are deleted in batches every
  // `retention_interval`. The default outlives a topic with Kafka's defaults (7 days of
  // retention.ms + 7 of segment.ms + 5 minutes).
  std::chrono::milliseconds inbox_retention{std::chrono::hours(24 * 15)};
  std::chrono::milliseconds retention_interval{std::chrono::minutes(5)};
  int retention_batch = 5000;
  // The replay window used, as given, when the broker does not answer DescribeConfigs
  // (e.g. librdkafka's mock cluster): it must cover retention.ms + segment.ms + the
  // broker's log.retention.check.interval.ms of the topics (see ReplayWindow). Zero:
  // unknown (then a non-zero inbox_retention is refused).
  std::chrono::milliseconds replay_window{0};
  std::chrono::milliseconds describe_configs_timeout{5'000};
  // The relay lag (an event's commit to its record's append) this consumer must tolerate
  // while it itself lags by the whole replay window: inbox_retention must exceed the
  // window by at least this (CheckInboxRetention). The default leaves the 15-day
  // retention over Kafka's default 14-day-5-minute window almost a day.
  std::chrono::milliseconds max_relay_lag{kDefaultMaxRelayLag};
};

// How long Kafka can deliver a record again, and what that was computed from.
// retention.ms is a minimum: a record lives until its segment rolls (segment.ms) and then
// until retention.ms has passed for the newest record of the segment, and the broker
// deletes on a check interval (log.retention.check.interval.ms). So
//   window = retention.ms + segment.ms + check interval   (largest over the topics)
// A compacted topic (cleanup.policy=compact without delete) keeps the latest record of
// every key forever; retention.ms = -1 keeps everything forever.
struct ReplayWindow {
  std::chrono::milliseconds window{0};
  bool infinite = false;   // retention.ms = -1 on the broker
  bool compacted = false;  // cleanup.policy = compact (without delete)
  // The parts of `window` (zero for a configured window).
  std::chrono::milliseconds retention{0}, segment{0}, check_interval{0};
  std::string source;  // "broker configs of topic T" or "configured replay_window"
};

// Kafka's defaults for what a topic's description may leave out.
inline constexpr std::chrono::milliseconds kDefaultSegmentMs{7LL * 24 * 3600 * 1000};
inline constexpr std::chrono::milliseconds kDefaultRetentionCheckIntervalMs{300'000};

// One topic's configuration entries as DescribeConfigs returns them (name, value).
struct TopicConfigs {
  std::string topic;
  std::vector<std::pair<std::string, std::string>> entries;
};

// The replay window of `topics` (their largest), or nullopt when one of them does not
// state retention.ms. segment.ms and the check interval default to Kafka's defaults.
std::optional<ReplayWindow> ReplayWindowFromConfigs(const std::vector<TopicConfigs>& topics);

// THE retention rule (the one place it is decided; Create() calls it).
// An inbox row is the only memory that a message was handled. If the row is deleted while
// the message can still be delivered again — a consumer group reset to the earliest
// offset, a new group, an offset commit lost in a crash long ago replays the topic from
// its oldest record — the redelivery would be applied a second time. Kafka can replay
// anything it still holds, for the ReplayWindow above. So rows must outlive that:
// inbox_retention > window, else kFailedPrecondition (an operator must raise the inbox
// retention or lower the topic's retention.ms / segment.ms). A compacted or infinitely
// retained topic needs rows kept forever. inbox_retention == 0 (keep forever) is always
// safe. An unknown window (broker silent, nothing configured) is refused as well.
// And the margin: a first-time event is applied only while its commit is younger than
// inbox_retention (older events are dead-lettered, see above), and a consumer may lag by
// as much as Kafka keeps (the window), so retention - window is what the relay's own lag
// (commit to append) may reach; it must be at least `max_relay_lag`.
Status CheckInboxRetention(std::chrono::milliseconds inbox_retention,
                           const std::optional<ReplayWindow>& window,
                           std::chrono::milliseconds max_relay_lag = kDefaultMaxRelayLag);

struct InboxStats {
  uint64_t applied = 0;        // handler ran and committed
  uint64_t duplicates = 0;     // inbox row existed: skipped
  uint64_t dead_lettered = 0;  // poison or permanent handler error
  uint64_t retries = 0;        // transient failures retried
  uint64_t retention_deleted = 0;
  uint64_t transactions = 0;   // database transactions that committed messages (a batch is one)
};

class InboxConsumer {
 public:
  // Validates options, connects the database pool and a Kafka consumer, and checks the
  // retention rule against the topics' replay window (kFailedPrecondition when the
  // inbox retention is too short). Does not subscribe yet. `handler` is called from
  // worker threads until Run() returns.
  //
  // Test-only failpoint, compiled in only when the tests are built (CMake
  // WALRELAY_FAILPOINTS): WALRELAY_INBOX_FAILPOINT=crash_after_db_commit:N (read here, once)
  // makes the process SIGKILL itself right after the database COMMIT that brings the
  // number of committed messages to N or past it, before their offsets are stored: the
  // crash window between the two commits.
  static Result<std::unique_ptr<InboxConsumer>> Create(InboxOptions options, Handler handler);

  // Stops and joins everything still running.
  ~InboxConsumer();
  InboxConsumer(const InboxConsumer&) = delete;
  InboxConsumer& operator=(const InboxConsumer&) = delete;

  // Creates (if missing) `inbox`, its received_at index and `inbox_dead_letter`.
  // Safe to race from several processes (serialised by an advisory lock).
  Status EnsureSchema();

  // Subscribes and processes until Stop(). Returns OK after a clean stop (stored offsets
  // committed, group left), or the error that ended it: a fatal consumer error, or a
  // database error with a statement fault (42xxx, 0A: schema, privileges; the message's
  // offset is not stored, it is redelivered after the fix).
  Status Run();

  // Asks Run() to return. Thread-safe, async-signal-unsafe (call from a normal thread).
  void Stop();

  // Deletes inbox rows of this consumer older than inbox_retention, in batches of
  // retention_batch, until none is left; returns the number deleted. The retention thread
  // calls this every retention_interval; exposed for operations and tests.
  Result<int64_t> RunRetentionOnce();

  InboxStats stats() const;

  // The window CheckInboxRetention was given at Create.
  const std::optional<ReplayWindow>& replay_window() const;

  class Impl;

 private:
  explicit InboxConsumer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The topics' replay window from the broker (DescribeConfigs: retention.ms, segment.ms,
// cleanup.policy; ReplayWindowFromConfigs), or nullopt when the broker does not answer
// within `timeout` (librdkafka's mock cluster never does), or the request fails. `rk` is any
// librdkafka client handle.
std::optional<ReplayWindow> DescribeReplayWindow(rd_kafka_t* rk,
                                                 const std::vector<std::string>& topics,
                                                 std::chrono::milliseconds timeout);

}  // namespace walrelay::inbox
