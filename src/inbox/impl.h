// Internal to walrelay::inbox (not part of its API): the consumer's implementation class
// and the small types its files share. One file per idea:
//   inbox.cc           the API surface: InboxMessage, Transaction, InboxConsumer forwarding
//   schema.cc          the inbox and dead-letter tables (EnsureSchema)
//   consumer_group.cc  Init, Run, the rebalance callback and the partition workers
//   process.cc         one message: dedup + handler in one transaction, retries, outcomes
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
//   workers        rd_kafka_consume_queue on their partition queue, one message at a time:
//                  dedup + handler in one transaction on a pooled connection, then
//                  rd_kafka_offsets_store. librdkafka's prefetch limits
//                  (queued.max.messages.kbytes) bound the memory per partition.
//   retention      deletes expired inbox rows every retention_interval.
#pragma once

#include <librdkafka/rdkafka.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "slot/pg_error.h"
#include "src/inbox/connection_pool.h"
#include "src/inbox/inbox.h"
#include "src/kafka/producer.h"

namespace walrelay::inbox {

// Reads and writes Transaction's record of its last database failure.
struct TransactionAccess {
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
        pool_(opt_.conninfo, opt_.max_db_connections) {}

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
  Result<Outcome> Process(const rd_kafka_message_t* m, const std::atomic<bool>& stop);
  // One attempt; on failure `*next` says what to do with the message.
  Result<Outcome> ApplyOnce(const InboxMessage& msg, const std::atomic<bool>& stop, Next* next);
  Result<Outcome> DeadLetterOnce(const InboxMessage& msg, const std::string& reason,
                                 const std::atomic<bool>& stop, Next* next);
  Status ProduceDeadLetter(const InboxMessage& msg, const std::string& reason);
  void AfterCommit();
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
  std::atomic<int64_t> commits_{0};

  std::atomic<uint64_t> applied_{0}, duplicates_{0}, dead_lettered_{0}, retries_{0},
      retention_deleted_{0};

  std::mutex retention_mu_;
  std::condition_variable retention_cv_;

  std::mutex fatal_mu_;
  Status fatal_;  // the error that stopped the consumer (Fail)
};

}  // namespace walrelay::inbox
