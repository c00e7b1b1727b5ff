// Exactly-once mode's decisions that need no broker (kafka.exactly_once; the pipeline
// applies them, src/relay/run/session.cc sets the mode up; docs/guarantees.md).
//
// The mode: a transactional producer (kafka::Producer with a transactional_id)
// puts one or more whole source transactions in each Kafka transaction, together with a
// checkpoint record (the position of the last source transaction it holds) on a compacted
// checkpoint topic under the stream's key; the slot is confirmed only after the commit. On
// start, the latest committed checkpoint says which source transactions Kafka already has:
// every one at or before it is skipped, the first after it is published exactly once.
//
//   StreamIdentity   what names the stream: the server (system identifier), database and
//                    slot. Its transactional.id is the same for every relay of the slot, so
//                    a relay that takes over fences the one it replaces.
//   Checkpoint       the checkpoint record's value, in the walrelay.position format.
//   DecideResume     what a session skips, from the checkpoint and the server's WAL end;
//                    a refusal names both positions.
//   TransactionBatcher  when to commit a Kafka transaction, and how far the slot may be
//                    confirmed meanwhile.
//
// Thread safety: pure functions and values.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/lsn.h"

namespace walrelay::relay {

struct StreamIdentity {
  std::string system_id;  // IDENTIFY_SYSTEM's systemid (decimal text)
  std::string database;
  std::string slot;

  // "<system_id>/<database>/<slot>": the checkpoint record's key.
  std::string Key() const;
  // "walrelay-<system_id>-<database>-<slot>": the default transactional.id.
  std::string TransactionalId() const;
};

// The last source transaction a committed Kafka transaction holds.
struct Checkpoint {
  Lsn commit_lsn;  // its commit LSN (walrelay.position's lsn)
  uint32_t xid = 0;
  int64_t commit_time_us = 0;
  uint32_t events = 0;  // outbox events of that source transaction (the position's ordinal)
};

// "lsn=16/B374D848;ordinal=3;xid=745;commit_time_us=...;source=checkpoint": the
// walrelay.position format (base/position.h), ordinal = events, source "checkpoint".
std::string FormatCheckpoint(const Checkpoint& checkpoint);
// nullopt when `text` is not a checkpoint FormatCheckpoint wrote.
std::optional<Checkpoint> ParseCheckpoint(std::string_view text);

struct ResumeDecision {
  enum class Kind {
    kFromSlot,     // no checkpoint yet: stream what the slot sends
    kSkipThrough,  // skip every source transaction with commit LSN <= skip_through
    kRefuse,       // the checkpoint and the slot disagree: `message` says how and the fix
  };
  Kind kind = Kind::kFromSlot;
  Lsn skip_through;
  std::string message;

  // Whether a source transaction committed at `commit_lsn` is already in Kafka.
  bool AlreadyPublished(Lsn commit_lsn) const {
    return kind == Kind::kSkipThrough && commit_lsn <= skip_through;
  }
};

// `server_wal_end`: the server's current WAL position. A checkpoint past it belongs to
// another history (a restored database, another server under the same identity): refused,
// as every event up to it would be skipped. A checkpoint behind the slot's confirmed
// position is no refusal: the slot moves past the last checkpoint on its own while no
// Kafka transaction is open (idle WAL, heartbeats), or after a run without exactly-once
// that published what it confirmed; a slot advanced by anything else is refused by the
// slot-trust rule before (invariant 11, progress.h).
ResumeDecision DecideResume(const std::optional<Checkpoint>& checkpoint, Lsn server_wal_end, std::string_view checkpoint_topic,
                            const StreamIdentity& stream);

// Cuts the stream into Kafka transactions at source transaction boundaries, and says how
// far the slot may be confirmed: a Kafka transaction holds one or more whole source
// transactions; it is committed at the first source commit after `interval` since it
// began, or once it holds `max_records` records (a source transaction larger than that
// still goes whole into one). The slot may be confirmed through the last source
// transaction of the last committed Kafka transaction, and through source transactions
// with no record after it (nothing of theirs waits in Kafka) while no record waits in an
// open one.
//   OnRecord()            a record of the open source transaction was produced
//   OnSourceCommit(...)   the source transaction ended (its position, and its end LSN: what
//                         the slot is confirmed with); true: commit the Kafka one now
//                         (after producing pending_checkpoint() into it)
//   Due(now)              between source transactions: true when the open Kafka
//                         transaction's interval is over (an idle stream must not keep
//                         committed source transactions invisible); commit it the same way
//   OnKafkaCommitted()    commit_transaction returned OK
//   OnKafkaAborted()      the Kafka transaction was aborted: nothing of it is visible, the
//                         session restarts from the slot's confirmed position
// Thread safety: one thread (the pipeline's).
class TransactionBatcher {
 public:
  using Clock = std::chrono::steady_clock;
  TransactionBatcher(std::chrono::milliseconds interval, uint64_t max_records)
      : interval_(interval), max_records_(max_records) {}

  void OnRecord(Clock::time_point now);
  bool OnSourceCommit(const Checkpoint& source, Lsn end_lsn, Clock::time_point now);
  // Call only between source transactions (a Kafka transaction never ends inside one).
  bool Due(Clock::time_point now);
  void OnKafkaCommitted();
  void OnKafkaAborted();

  // Whether a Kafka transaction is open (it holds records).
  bool open() const { return records_ != 0; }
  // What the open Kafka transaction's checkpoint record says: its last whole source
  // transaction. Set once OnSourceCommit returned true.
  const std::optional<Checkpoint>& pending_checkpoint() const { return pending_; }
  // The slot may be confirmed up to here (an end LSN; see above).
  Lsn ConfirmLimit() const { return limit_; }
  uint64_t records() const { return records_; }

 private:
  std::chrono::milliseconds interval_;
  uint64_t max_records_;
  uint64_t records_ = 0;                  // in the open Kafka transaction
  Clock::time_point began_;               // when its first record was produced
  std::optional<Checkpoint> last_whole_;  // its last whole source transaction
  Lsn last_whole_end_;                    // and that one's end LSN
  std::optional<Checkpoint> pending_;     // being committed
  Lsn pending_end_;
  Lsn limit_;  // an end LSN
};

}  // namespace walrelay::relay
