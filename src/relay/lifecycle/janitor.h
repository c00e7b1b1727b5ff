// OutboxJanitor: deletes outbox rows that are both older than the configured retention and
// delivered, in small batches, so the outbox never grows without bound (issue 14, design
// "janitor"; docs/operations.md section 4).
//
// Which rows are delivered: the relay records a snapshot bound per slot (core/progress.h): every
// transaction visible in it was acked by Kafka or dead-lettered. A row whose inserting
// transaction (xmin, or a subtransaction's xid, which is above its parent's) is older than
// the bound's xmin ended before the bound, so it is delivered, and lost-slot recovery,
// which republishes rows from the bound's xmin on (recovery/backfill.h), never needs it. So the
// janitor deletes exactly rows with age(xmin) > age(bound xmin) AND created_at < now() -
// retention: never a row that is not confirmed, not even when the relay is behind (the
// bound then stays behind too), and never one recovery could need. No bound recorded (a
// slot that never streamed): nothing is deleted. In poll mode (polling/poller.h) delivered means
// marked: published_at IS NOT NULL (set only after Kafka acked the row or it was
// dead-lettered).
//
// Partitions (outbox.cleanup partitions): partitions.h, the same rule for a whole
// partition; the round also creates the partitions ahead.
//
// Each batch is one short statement (at most batch_rows rows, FOR UPDATE SKIP LOCKED so it
// never waits for a writer), at most batches_per_second of them; it runs on its own
// connection and thread, and a failure is logged and counted, then retried at the next
// interval (the stream never waits for it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "slot/pg_error.h"
#include "src/relay/core/config.h"
#include "src/relay/lifecycle/periodic.h"

namespace walrelay::relay {

struct JanitorOptions {
  slot::ConnInfo conninfo;
  std::string slot;
  std::string progress_table;
  std::vector<std::string> tables;  // configured outbox tables
  std::string created_at_column;    // outbox.columns created_at
  std::chrono::milliseconds retention{0};
  int batch_rows = 1000;
  int batches_per_second = 10;
  std::chrono::milliseconds interval{10000};  // between rounds once a round found nothing
  // Poll mode (polling/poller.h): delivered = marked published_at, not preceding the slot's bound.
  bool poll_mode = false;
  // kPartitions: whole partitions are dropped instead of rows deleted (partitions.h), by
  // the same rule; kSameTransaction never runs a janitor.
  OutboxCleanup cleanup = OutboxCleanup::kJanitor;
  PartitionPeriod period = PartitionPeriod::kDaily;
};

class OutboxJanitor {
 public:
  explicit OutboxJanitor(JanitorOptions options) : options_(std::move(options)) {}
  ~OutboxJanitor() { Stop(); }
  OutboxJanitor(const OutboxJanitor&) = delete;
  OutboxJanitor& operator=(const OutboxJanitor&) = delete;

  void Start();
  void Stop();

  // One round over every table: batches until a batch deletes fewer than batch_rows rows,
  // or (kPartitions) MaintainPartitions. Returns the rows deleted, or the partitions
  // dropped. (The thread calls it; exposed for tests and tools.)
  Result<uint64_t> RunOnce();

  uint64_t deleted() const { return deleted_.load(std::memory_order_relaxed); }
  uint64_t dropped_partitions() const {
    return dropped_partitions_.load(std::memory_order_relaxed);
  }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }

  // The DELETE of one batch of `table` (exposed for the documentation and tests).
  std::string BatchSql(const std::string& table) const;
  // True for a row not yet delivered (SQL over an outbox table's columns).
  std::string UndeliveredPredicate() const;

 private:
  void Round();
  Result<uint64_t> DropPartitions(PGconn* conn);

  const JanitorOptions options_;
  std::atomic<uint64_t> deleted_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> dropped_partitions_{0};
  bool partman_said_ = false;
  PeriodicThread periodic_;
};

}  // namespace walrelay::relay
