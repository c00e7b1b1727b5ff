// TransactionAssembler: checks that a sequence of decoded pgoutput messages forms valid
// transactions, and tells the caller where it is (current xid, commit timestamp, the LSN
// to confirm when a transaction ends). It buffers nothing: messages stay where they are.
//
// Feed every decoded message in arrival order. Invariants (violations are kDataLoss,
// a definite error: restart from the slot's confirmed_flush_lsn):
//   - no Begin / Begin Prepare / Stream Start inside a transaction or stream segment;
//   - Commit closes a Begin and its commit_lsn equals Begin's final_lsn; end_lsn is after
//     commit_lsn; commit LSNs increase across transactions;
//   - Prepare closes a Begin Prepare with the same xid, prepare_lsn and end_lsn;
//   - Insert/Update/Delete/Truncate and transactional Message only inside a transaction
//     or a stream segment; they carry an xid exactly inside a stream segment;
//   - Origin only right after Begin, Begin Prepare or Stream Start;
//   - Stream Start/Stop pair up; Stream Commit/Abort/Prepare name a streamed transaction
//     that was started (first_segment) and are sent outside a segment;
//   - a non-transactional Message, Relation and Type are allowed anywhere.
//
// Use in_stream() as DecodeOptions::in_stream for the next message.
// After an error the state is unspecified: Reset() (or make a new assembler) on reconnect.
// Cost: O(1) per message, no allocation except the small list of open streamed xids.
// Thread safety: none; one assembler per replication stream.
#pragma once

#include <cstdint>
#include <vector>

#include "base/lsn.h"
#include "base/status.h"
#include "decoder/pgoutput.h"

namespace walrelay::pgoutput {

class TransactionAssembler {
 public:
  // What a fed message did to the transaction structure.
  enum class Boundary : uint8_t {
    kNone,  // a message inside (or, for Relation/Type/non-transactional Message, outside)
    kBegin,
    kCommit,  // end_lsn: the position to confirm once the transaction's events are durable
    kBeginPrepare,
    kPrepare,           // end_lsn: end of the PREPARE record
    kCommitPrepared,    // end_lsn: end of the COMMIT PREPARED record
    kRollbackPrepared,  // end_lsn: end of the ROLLBACK PREPARED record
    kStreamStart,
    kStreamStop,
    kStreamCommit,   // end_lsn: end of the streamed transaction's commit
    kStreamAbort,    // a streamed (sub)transaction rolled back
    kStreamPrepare,  // end_lsn: end of the PREPARE record of a streamed transaction
  };

  struct Event {
    Boundary boundary = Boundary::kNone;
    // The transaction this message belongs to or ended (0 for messages outside any).
    Xid xid = 0;
    // Valid for kCommit, kPrepare, kCommitPrepared, kRollbackPrepared, kStreamCommit,
    // kStreamPrepare.
    Lsn end_lsn;
    // Commit (or prepare) timestamp when known: from Begin/Begin Prepare for messages in
    // the transaction, from the closing message for streamed and two-phase ends.
    PgTimestamp commit_time = 0;
  };

  TransactionAssembler() = default;

  Result<Event> Feed(const Message& message);

  // Back to the initial state (no transaction, no open streams, no commit seen).
  void Reset();

  // Between Begin (or Begin Prepare) and its Commit (or Prepare).
  bool in_transaction() const {
    return state_ == State::kTransaction || state_ == State::kPrepared;
  }
  // Between Stream Start and Stream Stop: pass as DecodeOptions::in_stream.
  bool in_stream() const { return state_ == State::kStream; }
  // The current transaction's xid (the streamed top-level xid inside a segment); 0 outside.
  Xid xid() const { return state_ == State::kIdle ? 0 : xid_; }
  // Commit timestamp from Begin (prepare timestamp from Begin Prepare); 0 otherwise.
  PgTimestamp commit_time() const { return in_transaction() ? commit_time_ : 0; }
  // Begin's final_lsn (Begin Prepare's prepare_lsn) inside a transaction.
  Lsn final_lsn() const { return in_transaction() ? final_lsn_ : Lsn(); }
  // The commit_lsn of the last Commit / Stream Commit / Commit Prepared fed.
  Lsn last_commit_lsn() const { return last_commit_lsn_; }
  // Streamed transactions started and not yet committed, aborted or prepared.
  size_t open_streams() const { return open_streams_.size(); }

 private:
  enum class State : uint8_t { kIdle, kTransaction, kPrepared, kStream };

  Result<Event> On(const Begin& m);
  Result<Event> On(const Commit& m);
  Result<Event> On(const Origin& m);
  Result<Event> On(const Relation& m);
  Result<Event> On(const Type& m);
  Result<Event> On(const Insert& m);
  Result<Event> On(const Update& m);
  Result<Event> On(const Delete& m);
  Result<Event> On(const Truncate& m);
  Result<Event> On(const LogicalMessage& m);
  Result<Event> On(const StreamStart& m);
  Result<Event> On(const StreamStop& m);
  Result<Event> On(const StreamCommit& m);
  Result<Event> On(const StreamAbort& m);
  Result<Event> On(const BeginPrepare& m);
  Result<Event> On(const Prepare& m);
  Result<Event> On(const CommitPrepared& m);
  Result<Event> On(const RollbackPrepared& m);
  Result<Event> On(const StreamPrepare& m);

  Status CheckIdle(MessageType type) const;
  Status CheckChange(MessageType type, const std::optional<Xid>& xid) const;
  Status CheckStreamXid(MessageType type, const std::optional<Xid>& xid) const;
  Status CheckCommitLsn(MessageType type, Lsn commit_lsn, Lsn end_lsn) const;
  bool StreamOpen(Xid xid) const;
  void CloseStream(Xid xid);
  Event Inside(Boundary b = Boundary::kNone) const;

  State state_ = State::kIdle;
  bool origin_allowed_ = false;  // the previous message was Begin/Begin Prepare/Stream Start
  Xid xid_ = 0;
  PgTimestamp commit_time_ = 0;
  Lsn final_lsn_;
  Lsn prepare_end_lsn_;
  Lsn last_commit_lsn_;
  std::vector<Xid> open_streams_;
};

}  // namespace walrelay::pgoutput
