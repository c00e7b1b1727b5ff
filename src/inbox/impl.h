// Internal to walrelay::inbox (not part of its API): the consumer's implementation class
// and the small types its files share. One file per idea:
//   inbox.cc           the API surface: InboxMessage, Transaction, InboxConsumer forwarding
//   schema.cc          the inbox and dead-letter tables (EnsureSchema)
//   consumer_group.cc  Init, Run, the rebalance callback and the partition workers
//   process.cc         messages in batches (dedup + handlers in one transaction) and the
//                      one-message path every failure falls back to: retries, outcomes
//   dead_letter.cc     dead letters: the row (headers as jsonb) and the topic record
//   event_id.{h,cc}    the event id of a record and its validity as an inbox key
//   retention.cc       the retention rule, the broker's replay window, the retention task
//   connection_pool.*  the bounded pool of database connections the workers share
//
// Threads (see inbox.h for the contract and docs/inbox.md for the rationale):
//   Run() thread   rd_kafka_consumer_poll: serves the group protocol and the rebalance
//                  callback. On assign it splits every assigned partition's queue off the
//                  consumer queue (rd_kafka_queue_get_partition + forward to NULL, done
//                  before rd_kafka_assign, so the flag survives re-assignments) and starts
//                  one worker per partition; on revoke it stops and joins those workers,
//                  commits the stored offsets synchronously, then unassigns.
//   workers        rd_kafka_consume_queue on their partition queue: the first message
//                  waited for, then whatever else is queued (up to batch_max_messages,
//                  waiting at most batch_max_wait): dedup + handlers in one transaction
//                  on a pooled connection, then rd_kafka_offsets_store. librdkafka's prefetch limits
//                  (queued.max.messages.kbytes) bound the memory per partition.
//   retention      deletes expired inbox rows every retention_interval.
#pragma once

#include <librdkafka/rdkafka.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "slot/pg_error.h"
#include "src/inbox/connection_pool.h"
#include "src/inbox/inbox.h"
#include "src/inbox/pg.h"
#include "src/kafka/producer.h"

namespace walrelay::inbox {

// Reads and writes Transaction's record of its last database failure, and binds it to
// the attempt's pipeline.
struct TransactionAccess {
  static void Bind(Transaction& tx, pg::Pipeline* pipeline, size_t owner) {
    tx.pipeline_ = pipeline;
    tx.owner_ = owner;
  }
  static void Record(Transaction& tx, const Status& st, slot::PgFault fault) {
    tx.last_error_ = st;
    tx.last_fault_ = static_cast<int>(fault);
  }
  static slot::PgFault Fault(const Transaction& tx) {
    return static_cast<slot::PgFault>(tx.last_fault_);
  }
};

// The dedup insert: 1 row = new, 0 rows = a duplicate (see inbox.h).
inline constexpr std::string_view kInsertInbox =
    "INSERT INTO inbox (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING";

// True for the handler codes that mean "this message is bad" (dead-letter it).
bool IsPermanent(StatusCode code);

// What happens to a message after a failed attempt.
enum class Next {
  kRetry,       // roll back, back off, try the same message again
  kDeadLetter,  // the message is bad: dead-letter it
  kStop,        // no message can succeed: stop the consumer, Run() returns the error
};

// The inbox's reading of the shared SQLSTATE table (slot/pg_error.h).
Next FromFault(slot::PgFault fault);

enum class Outcome { kApplied, kDuplicate, kDeadLettered };

// A consumed record and what the consumer read from it. `msg` (and msg.event_id) view
// into `m` and `event_id`: an Item is filled in place (Decode) and never moved.
struct Item {
  rd_kafka_message_t* m = nullptr;
  InboxMessage msg;
  std::string event_id;
  // Why the record is dead-lettered without being applied: no usable event id, or an
  // event older than the inbox retention (TooOldToTell).
  std::optional<std::string> poison;
};

// Why a record must not be applied although its event id is fine: its event time (the
// walrelay.position header's commit_time_us; on republished records the row's created_at)
// is older than `inbox_retention`, so the inbox row that would make a redelivery a
// duplicate may be deleted already (retention.cc): the inbox cannot tell whether it
// applied the event. nullopt when it may be applied (no retention, no position header, no
// time, or younger).
std::optional<std::string> TooOldToTell(const InboxMessage& msg,
                                        std::chrono::milliseconds inbox_retention,
                                        std::chrono::system_clock::time_point now,
                                        int64_t append_time_ms = -1);

// Fills `out` from `m` (the event id extracted and validated: event_id.h; the age checked
// against `inbox_retention`: TooOldToTell).
void Decode(rd_kafka_message_t* m, std::string_view event_id_header,
            std::chrono::milliseconds inbox_retention, Item* out);

// One attempt at a message or a batch: a pooled connection inside BEGIN, and the
// statements of the handlers deferred on it (pg::Pipeline). Fail() rolls back and says
// through `*next` what happens to the message; the destructor rolls back an attempt that
// did not commit and returns the connection. Single-threaded.
class Attempt {
 public:
  Attempt(ConnectionPool& pool, Next* next) : pool_(pool), next_(next) { *next = Next::kRetry; }
  ~Attempt();
  Attempt(const Attempt&) = delete;
  Attempt& operator=(const Attempt&) = delete;

  // Leases a connection and opens the transaction. A failure is already Fail()ed.
  Status Begin(const std::atomic<bool>& stop);
  // Runs a statement of the consumer's own (the inbox or dead-letter tables).
  Result<pg::ResultPtr> Exec(std::string_view sql, std::span<const pg::RawParam> params,
                             std::string_view context);
  // Rolls back and returns `st`; `*next` is the shared table's reading of `fault`, or
  // `next`.
  Status Fail(Status st, slot::PgFault fault);
  Status Fail(Status st, Next next);
  // Waits for the deferred statements, then COMMIT. A failure is already Fail()ed.
  Status Commit();

  PGconn* conn() const { return conn_; }
  pg::Pipeline* pipeline() { return pipeline_ ? &*pipeline_ : nullptr; }

 private:
  ConnectionPool& pool_;
  Next* next_;
  PGconn* conn_ = nullptr;
  std::optional<pg::Pipeline> pipeline_;
  bool open_ = false;  // inside BEGIN, not yet committed or rolled back
};

// One assigned partition: its split-off queue and the thread that drains it.
struct PartitionWorker {
  std::string topic;
  int32_t partition = -1;
  rd_kafka_queue_t* queue = nullptr;
  std::atomic<bool> stop{false};
  std::thread thread;
};

class InboxConsumer::Impl {
 public:
  Impl(InboxOptions options, Handler handler)
      : opt_(std::move(options)),
        handler_(std::move(handler)),
        pool_({opt_.conninfo, opt_.password}, opt_.max_db_connections, opt_.statement_timeout) {}

  ~Impl() {
    Stop();
    StopWorkers(nullptr);
    if (rk_ != nullptr) {
      if (!closed_) rd_kafka_consumer_close(rk_);
      rd_kafka_destroy(rk_);
    }
  }

  Status Init();
  Status EnsureSchema();
  Status Run();
  void Stop() {
    stop_ = true;
    std::lock_guard lock(retention_mu_);
    retention_cv_.notify_all();
  }
  // Stops the consumer because of `st` (no message can succeed); Run() returns the first
  // such error.
  void Fail(const Status& st) {
    {
      std::lock_guard lock(fatal_mu_);
      if (fatal_.ok()) fatal_ = st;
    }
    spdlog::error("inbox: stopping the consumer: {}", st.ToString());
    Stop();
  }
  Result<int64_t> RunRetentionOnce();

  InboxStats stats() const {
    InboxStats s;
    s.applied = applied_.load();
    s.duplicates = duplicates_.load();
    s.dead_lettered = dead_lettered_.load();
    s.retries = retries_.load();
    s.retention_deleted = retention_deleted_.load();
    s.transactions = transactions_.load();
    return s;
  }

  const std::optional<ReplayWindow>& window() const { return window_; }

  static void RebalanceCb(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                          rd_kafka_topic_partition_list_t* parts, void* opaque);

 private:
  void StartWorkers(const rd_kafka_topic_partition_list_t* parts);
  // Stops and joins the workers of `parts` (all when null).
  void StopWorkers(const rd_kafka_topic_partition_list_t* parts);
  void WorkerLoop(PartitionWorker* w);
  // Consumed records of one partition, in offset order, in batches; a batch that fails
  // anywhere falls back (process.cc). Stores the offset of every record it finished. OK,
  // kCancelled on a stop, or the error that must stop the consumer.
  Status ProcessBatch(std::span<Item> items, const PartitionWorker& w);
  // One attempt at `items` in one transaction; counts them after the commit. On failure
  // `*blame` is the position of the item the failure is attributed to (nullopt when it is
  // nobody's in particular: BEGIN, the dedup insert, COMMIT) and `*next` what the
  // one-message path does with that item.
  Status ApplyBatch(std::span<Item> items, const std::atomic<bool>& stop,
                    std::optional<size_t>* blame, Next* next);
  // The one-message path: retries, dead letters and the stop decision for one record.
  // `failed` (when not OK) is an attempt already made in a batch, with its verdict
  // `failed_next`: decided first, exactly as if this path had made it.
  Status Process(Item& item, const std::atomic<bool>& stop, Status failed = Status::Ok(),
                 Next failed_next = Next::kRetry);
  Result<Outcome> DeadLetterOnce(const InboxMessage& msg, const std::string& reason,
                                 const std::atomic<bool>& stop, Next* next);
  // The handler, with exceptions caught (kInternal).
  Status CallHandler(const InboxMessage& msg, Transaction& tx);
  void StoreOffset(const PartitionWorker& w, int64_t offset);
  Status ProduceDeadLetter(const InboxMessage& msg, const std::string& reason);
  // After the database COMMIT of `messages` messages (the test failpoint).
  void AfterCommit(size_t messages);
  void RetentionLoop();

  InboxOptions opt_;
  Handler handler_;
  ConnectionPool pool_;
  rd_kafka_t* rk_ = nullptr;
  bool closed_ = false;
  std::optional<ReplayWindow> window_;
  std::atomic<bool> stop_{false};

  std::map<std::pair<std::string, int32_t>, std::unique_ptr<PartitionWorker>> workers_;

  std::mutex dlq_mu_;
  std::unique_ptr<kafka::Producer> dlq_;
  Status dlq_result_;

  int64_t failpoint_after_ = 0;  // crash_after_db_commit:N, 0 = off
  std::atomic<int64_t> committed_{0};  // messages whose transaction committed

  std::atomic<uint64_t> applied_{0}, duplicates_{0}, dead_lettered_{0}, retries_{0},
      retention_deleted_{0}, transactions_{0};

  std::mutex retention_mu_;
  std::condition_variable retention_cv_;

  std::mutex fatal_mu_;
  Status fatal_;  // the error that stopped the consumer (Fail)
};

}  // namespace walrelay::inbox
