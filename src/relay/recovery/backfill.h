// Lost-slot recovery: republishes, from the outbox tables, the rows a lost slot may not
// have delivered.
//
// When the slot is invalidated (wal_status 'lost': max_slot_wal_keep_size removed WAL it
// needed) or dropped, the WAL of the undelivered events is gone, but the rows are still in
// the outbox tables. Which rows? Neither ids nor created_at can say: a transaction can take
// low ids (or early timestamps) and commit long after later ones, and ids need not be
// integers (uuid keys). What does say it is *visibility*.
//
// The snapshot bound (core/progress.h). While streaming, after outbox events were handled, the
// relay reads a candidate `SELECT pg_current_snapshot(), pg_current_wal_insert_lsn()` on its
// side connection. The statement's snapshot S is taken before the position L is read, and
// a transaction becomes visible only after its commit record is inserted, so every
// transaction visible in S committed at or before L. The relay queues candidates; when the
// confirmed flush position reaches a candidate's L, every transaction visible in its S has
// been acked by Kafka (or dead-lettered; invariant 1), and that S is recorded as the bound.
// It trails the confirmed position by a status interval or two: recovery then republishes
// a little more, never less.
//
// Which rows are republished. Every outbox row whose inserting transaction (the tuple's
// xmin) is >= xmin(S), the oldest transaction still running when S was taken, read under
// the new slot's exported snapshot N. Why xmin(S) and not "not visible in S": a row
// inserted in a subtransaction (SAVEPOINT, a PL/pgSQL EXCEPTION block) carries the
// subtransaction's xid, and pg_snapshot lists running top-level xids only, so a subxid of a
// transaction that was running at S looks visible in S although that transaction committed
// later. Its xid is above its parent's, which is >= xmin(S): the xmin(S) bound covers it.
// Every row with a smaller xmin was inserted by a transaction that had ended at S
// (delivered, or rolled back). The price: transactions that started after the oldest one
// running at S and committed before S repeat too; normally that oldest one is a few
// milliseconds old, but a long-open transaction that holds an xid widens the set to
// everything since it began (the log states the expected count first).
//
// Xids are 32 bits in the tuple: a row's xmin is compared with xmin(S) modulo 2^32 within
// the span [xmin(S), xmax(N)), which is exact for every xid younger than 2^32
// transactions. Recovery refuses (CheckBound, before the slot is touched) when xmin(S) is
// 2^31 or more transactions old (xids may have wrapped since), or ahead of the server's
// xids (a restored or replaced database): `walrelay republish`, docs/operations.md.
//
// Steps (run/slot_recovery.cc, Session::Recover):
//   1. refuses when no bound is recorded (a progress row of a version that recorded ids)
//      or the bound cannot be trusted (CheckBound);
//   2. marks the recovery in the progress table (so a failure half-way redoes it);
//   3. a lost slot (invalidated) is dropped, and a lost or missing slot is created anew
//      with an exported snapshot N. A slot that is healthy is kept: the slot an earlier,
//      unfinished attempt made (its WAL holds the events committed since, table-less ones
//      included, which exist nowhere else), or one walrelay did not advance (made anew
//      by setup or by hand after the old one was gone: confirmed past the recorded
//      delivered position, core/progress.h); N is then a fresh snapshot, so the rows committed
//      since the kept slot began come twice, none is missed;
//   4. Backfill(): under N, counts and publishes the rows above (unmappable ones are
//      dead-lettered with `recovered` set, so they never collide with streamed letters),
//      logging progress at least every 10 s, keeping the relay's other connections alive
//      and its watchdog fed, recording every 500 ms the id up to which every row was acked
//      (a redo resumes after it: rows it skips were either acked, or are not in N and so
//      committed after the slot began and are streamed), and waits until Kafka acked all;
//   5. records N as the bound, the slot's start as delivered, clears the mark, and
//      streams from the slot: nothing is missed between.
//
// Order: by the configured id column (outbox.columns id, an identity in the documented
// schema); without one (a uuid key, the Debezium profile), by inserting transaction (xid)
// and then physical position. Neither is commit order: republished rows of one aggregate
// keep their order when its transactions ran one after another, which row locks on the
// aggregate normally ensure.
//
// Which rows repeat (consumers dedup on event_id): the rows above that were already
// delivered — transactions in flight around the bound, those that committed after it
// before the slot was lost — and rows UPDATEd after they were first published (an UPDATE
// writes a new tuple version with a new xmin): those go out in their *current* state,
// where streaming never publishes an UPDATE. Limits: rows deleted from the outbox before
// recovery cannot be republished; table-less (logical message) events of the lost WAL
// cannot be republished at all (the relay refuses recovery without outbox tables).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "base/lsn.h"
#include "base/status.h"
#include "slot/pg_error.h"
#include "src/relay/core/config.h"
#include "src/relay/core/dead_letter.h"
#include "src/relay/core/outbox_mapper.h"
#include "src/relay/core/outbox_rows.h"
#include "src/relay/core/pipeline.h"
#include "src/relay/core/progress.h"
#include "src/relay/core/relay_stats.h"
#include "src/relay/core/topic_errors.h"

namespace walrelay::relay {

struct BackfillResult {
  uint64_t expected = 0;  // rows counted under the snapshot before publishing
  uint64_t published = 0;
  uint64_t dead_lettered = 0;
  // The new slot's snapshot and consistent point: the bound to record once done.
  SnapshotBound new_bound;
};

// How a backfill runs long (invariant 12): `keep_alive` (may be empty) is called about
// every 500 ms while rows are read or acks awaited (the caller keeps its idle connections
// alive: idle_session_timeout, NAT idle cutoffs); `on_progress` (may be empty; only with an
// id column, the order, and one outbox table) as often, when it moved, and at the end,
// with the id up to which every row was acked or dead-lettered, so that a redo resumes
// after it; `after_id` (may be empty) is where this run resumes: rows with a larger id
// only.
struct BackfillControl {
  std::function<Status()> keep_alive;
  std::function<Status(const std::string& id)> on_progress;
  std::string after_id;
  const std::atomic<bool>* stop = nullptr;  // set: ends the work with kCancelled
  TopicErrors* topic_errors = nullptr;      // RowSelection::topic_errors
};

// Publishes the rows described above and waits for every ack. `snapshot` is the exported
// snapshot of the new slot, `consistent_point` its start; empty `snapshot` (a healthy slot
// kept on a redo, whose start is `consistent_point`): under a fresh snapshot of this
// transaction, so rows committed since the slot began come twice, none is missed.
// `bound` the recorded bound. kFailedPrecondition (an operator must act) when the bound is
// too old to compare xids.
Result<BackfillResult> Backfill(const RelayConfig& config, const slot::ConnInfo& conninfo,
                                const std::string& snapshot, Lsn consistent_point,
                                const SnapshotBound& bound, RecordSink& sink,
                                DeadLetterSink& dead_letters, RelayStats& stats,
                                const BackfillControl& control = {});

// Which outbox rows PublishRows publishes: a SQL predicate over each table's columns
// (system columns such as xmin included), their order, and words for the log.
struct RowSelection {
  std::string where;     // e.g. RecoveryPredicate(...), or "\"id\" >= 42"
  std::string order_by;  // an ORDER BY list (RowOrder)
  std::string log_name;  // prefix of the log lines: "recovery", "republish"
  std::string what;      // which rows, for the log ("inserted by transactions from ...")
  bool count_only = false;  // count (BackfillResult::expected) and publish nothing
  // Long work (BackfillControl): keep-alive and the acked id prefix every 500 ms, the
  // prefix at the end too (only with config.columns.id, the order, and one table).
  std::function<Status()> keep_alive;
  std::function<Status(const std::string& id)> on_progress;
  // A topic that does not exist or refuses writes (the topic check before a row's first
  // record of it, or the delivery report): with `topic_errors` (the relay's, which outlives
  // a redo), the streaming path's rule (invariant 13): kUnavailable (the caller redoes the
  // work after its backoff, nothing confirmed past the row) until the topic has failed
  // continuously for kafka.topic_error_timeout_ms, then its rows are dead-lettered with the
  // reason. Without (a one-shot `republish`): the refusal ends the work at once with the
  // fix; rows already produced repeat when it is run again.
  TopicErrors* topic_errors = nullptr;
};

// The order rows are republished in: the configured id column, or without one (a uuid
// key: the Debezium profile) the inserting transaction counted from `from_xid` modulo
// 2^32, then the physical position.
std::string RowOrder(const RelayConfig& config, uint64_t from_xid);

// The republishing core, shared by lost-slot recovery (Backfill) and `walrelay
// republish`: in `conn`'s open transaction, whose snapshot decides which rows exist,
// publishes the rows of config.tables that `selection` selects, mapped exactly like
// streamed rows, as records whose position is `position_lsn` with recovered=1; rows that
// cannot be mapped or that Kafka refuses for good are dead-lettered (recovered); progress
// is logged at least every 10 s; returns once Kafka acked every record. Any other
// failure ends it: then some rows may have been published and none is confirmed to
// anyone, so the whole selection can simply be published again. So does `stop` (may be
// null) once set, with kCancelled, also while waiting for acks from brokers that are
// down: a relay asked to stop mid-recovery stops, and the next run redoes the recovery.
Result<BackfillResult> PublishRows(const RelayConfig& config, PGconn* conn,
                                   const RowSelection& selection, Lsn position_lsn,
                                   RecordSink& sink, DeadLetterSink& dead_letters,
                                   RelayStats& stats, const std::atomic<bool>* stop = nullptr);

// The number of transactions between the bound's xmin and `xmax` (the xmax of a current
// snapshot): the span of xids recovery compares rows against. kDataLoss, with the fix (no
// session can fix it: Run() ends), when recovery cannot be sound: the bound is 2^31 or more
// transactions old, or ahead of `xmax` (the database was restored or replaced under the progress
// table).
Result<uint64_t> CheckBound(const SnapshotBound& bound, uint64_t xmax);

// The refusal when the slot is lost or gone and --recovery-enabled is false (kDataLoss: no
// session can fix it, Run() ends with it): what is at risk and the way out. `state` says
// what became of the slot ("lost (<why>)", "gone", ...). With outbox.cleanup
// same-transaction the rows are gone too, and the message says so.
Status RecoveryDisabledRefusal(const RelayConfig& config, std::string_view state);

// The WHERE clause that selects the rows to republish: xmin in [bound_xmin, bound_xmin +
// span) modulo 2^32. Exposed for the documentation and tests.
std::string RecoveryPredicate(uint64_t bound_xmin, uint64_t span);

}  // namespace walrelay::relay
