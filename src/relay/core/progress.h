// ProgressStore: what lost-slot recovery needs to know, kept in a small table of the source
// database (schema.h, ProgressTableDdl): per slot, the recorded *snapshot bound* and
// whether a recovery backfill is under way. recovery/backfill.h explains what the bound
// means and why it is sound.
//
// The relay takes bound candidates with ReadCandidate() (a snapshot, then the WAL insert
// position) and records one with SaveBound() once the confirmed flush position has reached
// its LSN. Thread safety: one owner thread; the store owns its connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/lsn.h"
#include "base/status.h"
#include "slot/pg_error.h"

namespace walrelay::relay {

// A PostgreSQL snapshot (pg_snapshot text form "xmin:xmax:xip,...", 64-bit xids) and the
// WAL insert position read after it: every transaction visible in `snapshot` committed
// (its commit record ended) at or before `lsn`.
// A SQL predicate over an outbox row: its inserting transaction (xmin) ended before the
// recorded bound of `slot` in `progress_table`, i.e. the row was delivered (recovery/backfill.h).
// NULL (false) when no bound is recorded. The bound's xmin is compared as an xid (its low
// 32 bits) in the server's own xid arithmetic, through age(). Used by the janitor and by
// the switch to poll mode (`walrelay setup --source-mode poll`).
std::string DeliveredBeforeBoundPredicate(std::string_view progress_table, std::string_view slot);

struct SnapshotBound {
  std::string snapshot;
  Lsn lsn;
  // The snapshot's xmin (64-bit): every transaction with a smaller xid had ended when the
  // snapshot was taken. 0 when `snapshot` cannot be parsed.
  uint64_t Xmin() const;
  // The snapshot's xmax: the first xid not yet assigned when it was taken. 0 when
  // `snapshot` cannot be parsed.
  uint64_t Xmax() const;
};

struct Progress {
  bool exists = false;      // any row for the slot: the slot has streamed before
  bool recovering = false;  // a backfill started and did not finish
  // The recorded bound: every transaction visible in it was delivered to Kafka. Absent
  // when none was recorded yet (or the row was written by a version that recorded ids).
  std::optional<SnapshotBound> bound;
  int64_t updated_at_unix = 0;  // when the slot's row was last written
  // The slot's trust (invariant 11): the relay confirms the slot no further than
  // `delivered`, and records it before it confirms, so a slot whose confirmed_flush_lsn is
  // past it was made or moved by something else (setup or a hand after the slot was lost, a
  // failover, another client) and misses the events between. Absent: written by a version
  // that did not record it (the slot is adopted as it is).
  std::optional<Lsn> delivered;
  std::string slot_origin;  // "run", "recovery", "republish", "adopted"; "" unknown
  // An unfinished backfill had every row up to this id (outbox.columns id) acked: its redo
  // starts after it. Empty: none, or the backfill does not order by id.
  std::string backfill_after_id;

  // Whether walrelay can vouch for a slot confirmed up to `confirmed_flush` (its
  // confirmed_flush_lsn; nullopt: nothing confirmed): it is within the recorded delivered
  // position, or no position was recorded (a slot never streamed, or a table of an earlier
  // version: adopted as it is).
  bool Vouches(const std::optional<Lsn>& confirmed_flush) const {
    return !delivered || !confirmed_flush || *confirmed_flush <= *delivered;
  }
};

class ProgressStore {
 public:
  // Connects (normal connection, slot::kRelaySession) and creates the table only when it
  // is missing: on an existing table the role needs SELECT, INSERT and UPDATE, no CREATE.
  static Result<std::unique_ptr<ProgressStore>> Open(const slot::ConnInfo& conninfo,
                                                     const std::string& table);
  ProgressStore(const ProgressStore&) = delete;
  ProgressStore& operator=(const ProgressStore&) = delete;

  Result<Progress> Load(const std::string& slot);
  // A bound candidate: `SELECT pg_current_snapshot(), pg_current_wal_insert_lsn()` (the
  // statement's snapshot is taken before the position is read).
  Result<SnapshotBound> ReadCandidate();
  // Records `bound` for the slot (replacing the earlier one) and marks the slot as having
  // streamed. REQUIRES: every transaction visible in bound.snapshot was delivered.
  Status SaveBound(const std::string& slot, const SnapshotBound& bound);
  Status SetRecovering(const std::string& slot, bool recovering);
  // Records that everything before `lsn` was delivered (Progress::delivered): the relay
  // may confirm the slot up to it. REQUIRES: true of `lsn`.
  Status SaveDelivered(const std::string& slot, Lsn lsn);
  // Records how the slot came to be (made by run, recovery or republish, or adopted). A
  // new origin means a slot other than the one an unfinished backfill was read against, so
  // that backfill's resume position (backfill_after_id) is cleared first: it would make
  // the next recovery skip rows nobody delivered against this slot.
  Status SaveSlotOrigin(const std::string& slot, std::string_view origin);
  // "" clears it.
  Status SaveBackfillAfterId(const std::string& slot, const std::string& id);
  // A statement, so that the connection does not sit idle through a long backfill
  // (idle_session_timeout, NAT idle cutoffs).
  Status KeepAlive();
  // pg_current_wal_insert_lsn(): read after a record committed, a position at or past the
  // end of that record's commit.
  Result<Lsn> WalInsertPosition();
  // The position every physical slot in `physical_slots` has flushed (the smallest
  // restart_lsn: a standby's walreceiver reports its flush position through its slot);
  // Lsn() when one of them does not exist or has none.
  Result<Lsn> StandbysFlushed(const std::vector<std::string>& physical_slots);

 private:
  ProgressStore(slot::PgConnPtr conn, std::string table)
      : conn_(std::move(conn)), table_(std::move(table)) {}
  // INSERT or UPDATE one column of the slot's row; `value` is cast to `type`; "" = NULL.
  Status SetColumn(const std::string& slot, std::string_view column, std::string_view type,
                   const std::string& value, std::string_view what);
  Result<slot::PgResultPtr> Exec(const std::string& sql, const std::vector<std::string>& params,
                                 std::string_view what);
  slot::PgConnPtr conn_;
  std::string table_;  // quoted
};

// The slot's trust across a failover (invariant 11; PostgreSQL 17+, a failover slot and
// synchronized_standby_slots). A standby's copy of the slot is synchronized up to any
// position the standby has flushed, but the record that vouches for that position is
// written after it, so a promoted standby could hold a slot confirmed past the record it
// holds and call it untrusted (a needless recovery: duplicates and a lost-slot alert). The
// gate therefore releases a recorded position for confirming only once every standby in
// `standby_slots` has flushed the record's commit. With no standby slots named, each
// position is released as it is recorded (nothing to wait for; the start checks warn).
class DeliveredRecorder {
 public:
  // `released`: the position recorded (and confirmable) before this session streams.
  DeliveredRecorder(ProgressStore& store, std::string slot, std::vector<std::string> standby_slots,
                    Lsn released)
      : store_(store),
        slot_(std::move(slot)),
        standby_slots_(std::move(standby_slots)),
        recorded_(released),
        released_(released) {}
  // Records `acked` when it is past the last record, then returns the highest position the
  // pipeline may confirm: recorded, and (with standby slots) flushed by every standby.
  Result<Lsn> Record(Lsn acked);
  // How long the oldest recorded position has waited for the standbys; 0 when none waits.
  std::chrono::steady_clock::duration Waiting() const;

 private:
  struct Pending {
    Lsn delivered;
    Lsn record_end;  // the WAL insert position after the record committed
    std::chrono::steady_clock::time_point at;
  };
  ProgressStore& store_;
  const std::string slot_;
  const std::vector<std::string> standby_slots_;
  std::vector<Pending> pending_;  // oldest first; at most kMaxPending (the newest merged)
  Lsn recorded_, released_;
  std::chrono::steady_clock::time_point last_warning_;
  static constexpr size_t kMaxPending = 64;
};

}  // namespace walrelay::relay
