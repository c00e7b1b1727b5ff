// Poller: the polling publisher (`walrelay run --source-mode poll`), for databases where a
// logical replication slot is not available (wal_level cannot be changed, a DBA forbids
// slots) or not wanted. A sibling of the WAL source: the same OutboxMapper, record
// headers, RecordSink (the idempotent producer) and DeadLetterSink, so records are the
// same in both modes and consumers do not know which one published them.
//
// One poll, per outbox table, is one transaction:
//
//   BEGIN
//   SELECT tableoid, ctid, id, retry_count, xmin, <mapped columns> FROM outbox
//    WHERE published_at IS NULL AND (retry_at IS NULL OR retry_at <= now())
//          [AND shard] [AND older-transactions gate]
//    ORDER BY id LIMIT poll_batch_rows FOR UPDATE SKIP LOCKED
//   produce every row; wait until Kafka acked (or refused) every record
//   UPDATE outbox SET published_at = now()
//    WHERE tableoid = <partition> AND ctid = ANY(acked or dead-lettered rows of it)
//   UPDATE outbox SET retry_count = retry_count + 1, last_error, retry_at  (failed rows)
//   COMMIT
//
// A crash, a lost connection or a failed delivery report (other than the row's own fault)
// rolls the transaction back: the batch's rows stay unpublished and are produced again by
// the next poll (at least once; consumers dedup on the event id). Nothing is marked
// published before Kafka acked it, so nothing is lost.
//
// A row's own faults. Unmappable (NULL aggregate id, a topic outside allowed_topics, ...):
// dead-lettered at once and marked published. Refused by the broker for good (larger than
// its limit): dead-lettered and marked. Its topic does not exist or may not be written:
// retry_count + 1, last_error and retry_at (when it is polled again: now +
// kafka_topic_error_timeout / poll_max_attempts, so a topic gets about as long to appear
// as in WAL mode), committed with the batch, so its batch-mates are published by the same
// poll; after poll_max_attempts such failures it is dead-lettered with the last reason.
// A row waiting for its retry (failed at least once, not yet published) holds back the
// later rows of its aggregate, whatever their topic, and only those: the poll's SELECT
// skips a row that has such an earlier row (PollWaitingIndexSql's partial index answers
// that), and within a poll the rows after a failed row of the same aggregate are left
// untouched (not produced, no attempt counted). So an aggregate's events are published in
// id order also across a topic that appears late (the other aggregates flow meanwhile);
// a dead-lettered row stops holding back its aggregate. A failed dead-letter write fails the poll (rolled back, retried):
// an event is published, dead-lettered, or still unpublished, never dropped.
//
// Dead letters of the poller are keyed (core/dead_letter.h) by slot "poll:<slot>", commit_lsn
// = the row's id as a number, ordinal = the table's place in source.tables: writing one
// twice (a poll rolled back after the letter was committed) keeps one row.
//
// Order. Rows are published in id order, and a row is marked only after every row before
// it in the batch was acked, which keeps id order per partition. But id order is not
// commit order: a transaction that took id 5 may commit after one that took id 6, and a
// plain `ORDER BY id` poll publishes 6 first and 5 at the next poll. For two events of one
// aggregate this reorders them only when their transactions ran concurrently (writers that
// lock the aggregate's row before inserting its event, the usual pattern, serialise them).
// The gate (poll_wait_for_older_transactions, on by default) closes most of that window:
// a row is polled only once every transaction older than its own inserting transaction has
// ended (its xmin precedes the snapshot's xmin), so a transaction still holding a smaller
// id is waited for. What remains is the tiny window between a transaction taking its id
// from the sequence and getting its xid. The price: a long-open writing transaction
// anywhere in the cluster delays publishing until it ends (read-only ones do not; the
// backlog age metric shows it).
//
// Replicas. One unsharded poller keeps per-aggregate order as above. Several replicas must
// be sharded (poll_shard "I/N" on each, I = 0..N-1): replica I polls only aggregates with
// (hashtext(aggregate_id) & 2147483647) % N = I, so every aggregate has one publisher. The
// mask matters: hashtext is signed and `%` keeps the sign, so without it the aggregates
// with negative hashes would never be published. Several unsharded replicas with SKIP
// LOCKED do not keep order: while one waits for the acks of aggregate A's event 1, another
// skips the locked row and publishes A's event 2.
//
// Thread safety: single-threaded; the sink calls back from inside Poll().
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "slot/pg_error.h"
#include "src/metrics/registry.h"
#include "src/relay/core/config.h"
#include "src/relay/core/dead_letter.h"
#include "src/relay/core/outbox_mapper.h"
#include "src/relay/core/pipeline.h"
#include "src/relay/core/relay_stats.h"

namespace walrelay::relay {

// The predicate over table alias `alias` of a row that waits for its retry: it failed at
// least once and is not published yet.
std::string PollWaitingPredicate(std::string_view alias);

// The slot label of the poller's dead letters (core/dead_letter.h keys letters by it): "poll:"
// and source.slot, apart from the WAL relay's letters of the same slot.
std::string PollDeadLetterSlot(const RelayConfig& config);

// The SQL predicate of a shard over the aggregate id column ("" when unsharded).
std::string PollShardPredicate(const std::string& aggregate_id_column, const PollShard& shard);

// The SELECT of one poll of `table` (see above).
std::string PollSelectSql(const RelayConfig& config, const std::string& table,
                          const PollShard& shard);

// The backlog of the outbox tables, for metrics: unpublished rows, the age of the oldest
// one (seconds; 0 when none or without created_at), rows that failed at least once.
struct PollBacklog {
  uint64_t rows = 0;
  double oldest_age_seconds = 0;
  uint64_t retrying_rows = 0;
};

class Poller {
 public:
  // `conn` is a normal connection (autocommit between polls) that outlives the Poller, as
  // do the other references. `rows_per_poll`, `produce_latency`: null = not measured.
  Poller(const RelayConfig& config, PGconn* conn, RecordSink& sink, DeadLetterSink& dead_letters,
         RelayStats& stats, metrics::Histogram* rows_per_poll,
         metrics::Histogram* produce_latency);
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // Checks the tables: each has the poll columns (else an error naming `walrelay setup
  // --source-mode poll`), and reads whether its payload is bytea.
  Status Prepare();

  // One poll of every table (one transaction each). Returns the rows it handled
  // (published, dead-lettered or counted as failed); 0 = nothing to do. While waiting for
  // acks it returns kUnavailable (rolled back) once `stop` is set and `shutdown_timeout`
  // passed. Any error leaves the connection's transaction to be rolled back by the caller
  // (closing it does).
  Result<uint64_t> PollOnce(const std::atomic<bool>& stop);

  // Reads the backlog (outside any poll); the caller exports it.
  Result<PollBacklog> ReadBacklog();

 private:
  Result<uint64_t> PollTable(size_t table_index, const std::atomic<bool>& stop);

  const RelayConfig& config_;
  PGconn* conn_;
  RecordSink& sink_;
  DeadLetterSink& dead_letters_;
  RelayStats& stats_;
  metrics::Histogram* rows_per_poll_;
  metrics::Histogram* produce_latency_;
  PollShard shard_;
  OutboxMapper mapper_;
  std::vector<bool> payload_is_bytea_;
  std::vector<std::string> select_sql_;
  // Topics the sink said exist and may be written, until when that is believed.
  std::map<std::string, std::chrono::steady_clock::time_point, std::less<>> topics_ok_;
  BrokerReachWatch reach_;
};

}  // namespace walrelay::relay
