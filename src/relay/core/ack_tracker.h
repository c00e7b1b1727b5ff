// AckTracker: turns Kafka delivery reports (any order) into the flush LSN sent back to
// PostgreSQL (architecture invariant 1, "no loss").
//
// Transactions arrive from the replication stream in commit order. Their events are
// produced as they stream, before the transaction's Commit is seen, so a large
// transaction is never buffered; acks come back in any order. The flush LSN is the
// end_lsn (pgoutput Commit's end_lsn, not commit_lsn) of the newest transaction T such
// that T and every transaction before it are committed in the stream and have every
// event acked. It never moves backwards.
//
// State is a deque of open/committed transactions in stream order, each with a count of
// unacked events; fully acked committed transactions are popped from the front. A
// committed transaction without events (PostgreSQL 14 sends empty ones, wal2json too, and
// a publication wider than the outbox sends transactions of other tables) is folded into
// the committed transaction before it, which only takes over its end LSN: memory is
// O(transactions in flight that carry events), at most one entry per unacked event, never
// O(transactions) or O(events). Every operation is O(1) amortized.
//
// Typical use:
//   AckTracker::Tx tx = tracker.BeginTransaction();
//   for each outbox row: producer.Produce(..., /*cookie=*/tracker.AddEvent(tx));
//   tracker.CommitTransaction(tx, commit.end_lsn);
//   delivery report OK:  tracker.Ack(cookie);  confirm tracker.FlushLsn()
//   delivery report error: tear down, restart from the slot (Reset() or a new tracker).
//
// Thread safety: none. Single-threaded, used from the relay thread that also serves the
// producer's delivery reports.
#pragma once

#include <cstdint>
#include <deque>

#include "base/lsn.h"

namespace walrelay::relay {

class AckTracker {
 public:
  // A transaction's sequence number in stream order (starts at 1).
  using Tx = uint64_t;
  // An event's ack token: the sequence of the transaction it belongs to. Fits a Kafka
  // delivery-report cookie as is.
  using Token = uint64_t;

  AckTracker() = default;

  // Opens the next transaction in stream order.
  // REQUIRES: the previous transaction was committed (the stream does not interleave
  // transactions while streaming of in-progress transactions is off).
  Tx BeginTransaction();

  // Registers one more event of the open transaction `tx` and returns its ack token.
  // REQUIRES: `tx` is the open (not yet committed) transaction.
  Token AddEvent(Tx tx);

  // Marks `tx` committed at `end_lsn`. A transaction with no events (or all acked already)
  // becomes flushable at once, in order; one with no events behind a transaction still in
  // flight is folded into it (its sequence is reused by the next BeginTransaction).
  // REQUIRES: `tx` is the open transaction; end_lsn is not below earlier end LSNs.
  void CommitTransaction(Tx tx, Lsn end_lsn);

  // One event of the token's transaction was acked by Kafka.
  // REQUIRES: one Ack per AddEvent token (the producer reports each record exactly once).
  void Ack(Token token);

  // End LSN of the newest fully acked transaction whose predecessors are all fully acked,
  // raised by ObserveIdlePosition; Lsn::Invalid() until the first one. Monotonic.
  Lsn FlushLsn() const { return flush_lsn_; }

  // A keepalive / server position seen while the stream is idle. When no transaction is
  // open or waiting for acks, the flush LSN may advance to `server_lsn` (invariant 5:
  // the slot never silently holds WAL). Returns the (possibly advanced) flush LSN.
  Lsn ObserveIdlePosition(Lsn server_lsn);

  // Events produced but not yet acked, over all transactions.
  uint64_t InFlightEvents() const { return in_flight_events_; }
  // Events of transactions not yet covered by FlushLsn() (acked or not): what a crash now
  // would replay, before the status update.
  uint64_t UnflushedEvents() const { return unflushed_events_; }
  // Events of all transactions ever covered by FlushLsn(), cumulative.
  uint64_t FlushedEventsTotal() const { return flushed_events_total_; }
  // Every transaction with a sequence <= this is covered by FlushLsn() (a folded empty
  // transaction may be covered before its sequence is: the bound is conservative).
  Tx FlushedThrough() const { return first_seq_ - 1; }
  // Transactions open or committed but not yet flushable.
  size_t PendingTransactions() const { return txs_.size(); }

  // The oldest unflushed transaction's progress: which one it is and how many of its events
  // were acked. While it has unacked events (`waiting`), a value that stays the same means
  // the confirmed position is held by events Kafka does not acknowledge, even while later
  // transactions' events (other partitions, other brokers) are acknowledged: the pipeline's
  // "waiting for Kafka" clock (Pipeline::NoteKafkaWait) restarts whenever it changes.
  struct FrontProgress {
    Tx front = 0;
    uint64_t acked = 0;
    bool waiting = false;  // the front transaction has unacked events
    friend bool operator==(const FrontProgress&, const FrontProgress&) = default;
  };
  FrontProgress Front() const {
    if (txs_.empty()) return {first_seq_, 0, false};
    return {first_seq_, txs_.front().events - txs_.front().pending, txs_.front().pending > 0};
  }

  // Forgets everything in flight (after a teardown, before streaming restarts from the
  // slot). The flush LSN is kept: it was confirmed and stays a lower bound; sequences keep
  // counting so stale tokens from the old producer cannot match new transactions.
  void Reset();

 private:
  struct TxState {
    uint64_t pending = 0;  // events added and not yet acked
    uint64_t events = 0;   // events added
    bool committed = false;
    Lsn end_lsn;
  };

  void PopFlushable();

  std::deque<TxState> txs_;  // txs_[i] has sequence first_seq_ + i
  Tx first_seq_ = 1;         // sequence of txs_.front()
  Tx next_seq_ = 1;          // sequence BeginTransaction() hands out next
  uint64_t in_flight_events_ = 0;
  uint64_t unflushed_events_ = 0;
  uint64_t flushed_events_total_ = 0;
  Lsn flush_lsn_;
};

}  // namespace walrelay::relay
