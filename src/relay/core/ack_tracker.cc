#include "src/relay/core/ack_tracker.h"

#include <cassert>

namespace walrelay::relay {

AckTracker::Tx AckTracker::BeginTransaction() {
  assert((txs_.empty() || txs_.back().committed) && "BeginTransaction inside an open one");
  txs_.emplace_back();
  return next_seq_++;
}

AckTracker::Token AckTracker::AddEvent(Tx tx) {
  assert(!txs_.empty() && tx == next_seq_ - 1 && !txs_.back().committed &&
         "AddEvent outside the open transaction");
  ++txs_.back().pending;
  ++txs_.back().events;
  ++in_flight_events_;
  ++unflushed_events_;
  return tx;
}

void AckTracker::CommitTransaction(Tx tx, Lsn end_lsn) {
  assert(!txs_.empty() && tx == next_seq_ - 1 && !txs_.back().committed &&
         "CommitTransaction of a transaction that is not open");
  (void)tx;
  TxState& state = txs_.back();
  state.committed = true;
  state.end_lsn = end_lsn;
  if (state.events == 0 && txs_.size() >= 2) {
    // Folded into the committed transaction before it: an empty transaction becomes
    // flushable exactly when that one does, and only moves the end LSN. Its sequence was
    // never handed out as a token, so the next transaction reuses it.
    txs_[txs_.size() - 2].end_lsn = end_lsn;
    txs_.pop_back();
    --next_seq_;
    return;
  }
  PopFlushable();
}

void AckTracker::Ack(Token token) {
  // Tokens below first_seq_ belong to popped (or reset) transactions: nothing to do.
  if (token < first_seq_ || token - first_seq_ >= txs_.size()) {
    assert(token < first_seq_ && "Ack of an unknown token");
    return;
  }
  TxState& state = txs_[token - first_seq_];
  assert(state.pending > 0 && "more acks than events");
  if (state.pending == 0) return;
  --state.pending;
  --in_flight_events_;
  if (token == first_seq_) PopFlushable();
}

void AckTracker::PopFlushable() {
  while (!txs_.empty() && txs_.front().committed && txs_.front().pending == 0) {
    if (txs_.front().end_lsn > flush_lsn_) flush_lsn_ = txs_.front().end_lsn;
    unflushed_events_ -= txs_.front().events;
    flushed_events_total_ += txs_.front().events;
    txs_.pop_front();
    ++first_seq_;
  }
}

Lsn AckTracker::ObserveIdlePosition(Lsn server_lsn) {
  if (txs_.empty() && server_lsn > flush_lsn_) flush_lsn_ = server_lsn;
  return flush_lsn_;
}

void AckTracker::Reset() {
  first_seq_ += txs_.size();
  assert(first_seq_ == next_seq_);
  txs_.clear();
  in_flight_events_ = 0;
  unflushed_events_ = 0;
}

}  // namespace walrelay::relay
