// Relay::Session::Recover: what `walrelay run` does when Start() finds the slot gone, lost
// (invalidated), untrusted (confirmed past what walrelay recorded as delivered) or
// unfinished (made by a recovery or republish that did not finish): refuse with the fix,
// or keep or make the slot and backfill from the outbox tables (recovery/backfill.h) with
// progress shown and connections kept alive (invariants 11 and 12).
#include <spdlog/spdlog.h>

#include "src/relay/recovery/backfill.h"
#include "src/relay/run/session.h"

namespace walrelay::relay {

Result<Lsn> Relay::Session::Recover(const slot::ConnInfo& conninfo, const Progress& progress,
                                    SlotCondition condition, const slot::SlotInfo* existing) {
  const bool keep = condition == SlotCondition::kUnfinished ||
                    condition == SlotCondition::kUntrusted;  // a healthy slot
  std::string state;
  switch (condition) {
    case SlotCondition::kGone:
      state = "gone";
      break;
    case SlotCondition::kLost:
      state = "lost";
      break;
    case SlotCondition::kUntrusted:
      state = "not the slot walrelay streamed: it is confirmed up to " +
              existing->confirmed_flush_lsn->ToString() + ", past " +
              progress.delivered->ToString() +
              ", the last position walrelay recorded as delivered, so it was made anew (by "
              "`walrelay setup` from an earlier version, by hand or by another tool) after "
              "the one walrelay streamed was dropped or lost, and the events committed in "
              "between are not in it";
      break;
    case SlotCondition::kUnfinished:
      state = progress.slot_origin == "republish"
                  ? "made by a `walrelay republish --create-slot` that did not finish"
                  : "being recovered (an earlier recovery did not finish)";
      break;
  }
  // Refusals below are kDataLoss: no session can fix them, so Run() ends with the fix
  // instead of retrying (like a lost slot without any progress, in Start()).
  if (!config_.recovery_enabled) return RecoveryDisabledRefusal(config_, state);
  if (!progress.bound) {
    return DataLossError(
        "replication slot " + config_.slot + " is " + state + ", but " + config_.progress_table +
        " records no snapshot bound for it (its rows were written by a walrelay version that "
        "recorded outbox ids, which cannot bound a recovery soundly, or the relay never "
        "confirmed a bound): the rows to republish are unknown. Fix: " +
        (progress.slot_origin == "republish"
             ? std::string("run the same `walrelay republish --create-slot` again (it resumes "
                           "with the slot it made) and restart")
             : "drop the slot if it still exists, run `walrelay republish --all "
               "--create-slot` (it makes the slot anew and records a bound; "
               "docs/operations.md, lost slot) and restart"));
  }
  {  // before touching anything: can this bound be trusted?
    WALRELAY_ASSIGN_OR_RETURN(SnapshotBound now, progress_->ReadCandidate());
    WALRELAY_RETURN_IF_ERROR(CheckBound(*progress.bound, now.Xmax()).status());
  }
  spdlog::error(
      "replication slot {} is {}: recovering — {} and republishing from the outbox tables "
      "the rows of transactions not known delivered at the recorded bound (snapshot {} at "
      "{}; consumers will see duplicates)",
      config_.slot, state,
      keep ? "keeping the slot (it is healthy: its WAL holds the events committed since it "
             "began, table-less ones included)"
           : "recreating it",
      progress.bound->snapshot, progress.bound->lsn.ToString());
  WALRELAY_RETURN_IF_ERROR(progress_->SetRecovering(config_.slot, true));
  std::string snapshot;  // the new slot's exported one; none for a kept slot (fresh)
  Lsn start;             // where the slot streams from
  std::string resume_after;
  if (keep) {
    start = existing->confirmed_flush_lsn.value_or(Lsn());
    // A redo with the slot the earlier attempt made resumes after what it had acked.
    if (condition == SlotCondition::kUnfinished) resume_after = progress.backfill_after_id;
  } else {
    if (condition == SlotCondition::kLost) {
      WALRELAY_RETURN_IF_ERROR(admin_->DropSlot(config_.slot));
    }
    // A new slot: what an earlier attempt acked is no guide (it was read against the
    // slot that is gone).
    WALRELAY_RETURN_IF_ERROR(progress_->SaveBackfillAfterId(config_.slot, ""));
    WALRELAY_ASSIGN_OR_RETURN(auto created, CreateMissingSlot(*conn_, config_, true));
    snapshot = created.snapshot_name;
    start = created.consistent_point;
    // The new slot's identity, at once: a redo finds it unadvanced and keeps it (the
    // recovering mark says its backfill is unfinished); one made by anything else after
    // it would be confirmed past this.
    WALRELAY_RETURN_IF_ERROR(progress_->SaveDelivered(config_.slot, start));
    WALRELAY_RETURN_IF_ERROR(progress_->SaveSlotOrigin(config_.slot, "recovery"));
  }
  // Long work (invariant 12): the watchdog sees the backfill move, /readyz and systemd's
  // STATUS say it recovers, and the connections this session keeps (the slot's lock, the
  // progress and dead-letter writers) get a statement every second.
  struct Recovering {
    RelayStats& stats;
    ~Recovering() { stats.recovering.store(0); }
  } recovering{stats_};
  stats_.recovering.store(1);
  BackfillControl control;
  control.stop = &relay_.stop_;
  control.after_id = resume_after;
  control.topic_errors = relay_.topic_errors_.get();  // the bound outlives a redo
  control.keep_alive = [this]() -> Status {
    WALRELAY_RETURN_IF_ERROR(conn_->IdentifySystem().status());
    WALRELAY_RETURN_IF_ERROR(admin_->CurrentWalLsn().status());
    WALRELAY_RETURN_IF_ERROR(progress_->KeepAlive());
    return dead_letters_->KeepAlive();
  };
  control.on_progress = [this](const std::string& id) {
    return progress_->SaveBackfillAfterId(config_.slot, id);
  };
  WALRELAY_ASSIGN_OR_RETURN(BackfillResult result,
                            Backfill(config_, conninfo, snapshot, start, *progress.bound, *sink_,
                                     *dead_letters_, stats_, control));
  // Every transaction visible in the snapshot is now delivered: it is the bound; the slot
  // starts at `start`, everything before which was delivered (or is not in it).
  WALRELAY_RETURN_IF_ERROR(progress_->SaveBound(config_.slot, result.new_bound));
  bound_recorded_ = true;
  WALRELAY_RETURN_IF_ERROR(progress_->SaveDelivered(config_.slot, start));
  if (condition == SlotCondition::kUntrusted) {
    WALRELAY_RETURN_IF_ERROR(progress_->SaveSlotOrigin(config_.slot, "adopted by recovery"));
  }
  WALRELAY_RETURN_IF_ERROR(progress_->SaveBackfillAfterId(config_.slot, ""));
  WALRELAY_RETURN_IF_ERROR(progress_->SetRecovering(config_.slot, false));
  relay_.stats_.slot_recoveries.fetch_add(1);
  spdlog::warn(
      "recovery of slot {} done: {} events republished, {} dead-lettered ({} expected); "
      "streaming from {}",
      config_.slot, result.published, result.dead_lettered, result.expected, start.ToString());
  return start;
}

}  // namespace walrelay::relay
