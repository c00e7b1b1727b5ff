// Relay::Session (internal to run/): one streaming session of `walrelay run`. Its
// connections, producer and pipeline live and die together; Relay::Run (relay.cc) makes
// one per attempt. session.cc starts and ticks it; slot_recovery.cc is its Recover(), the
// orchestration of a slot that is gone, lost, untrusted or unfinished.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <optional>

#include "slot/replication_connection.h"
#include "slot/slot_admin.h"
#include "src/relay/core/dead_letter.h"
#include "src/relay/core/pipeline.h"
#include "src/relay/core/progress.h"
#include "src/relay/run/relay.h"

namespace walrelay::relay {

using Clock = std::chrono::steady_clock;

// CREATE_REPLICATION_SLOT for a slot found missing. 42710 (duplicate_object) means another
// relay created it in between: it streams the slot now, so wait and retry (kUnavailable);
// the next session finds the slot and waits while the other relay reads it.
Result<slot::CreatedSlot> CreateMissingSlot(slot::ReplicationConnection& conn,
                                            const RelayConfig& config, bool export_snapshot);

// One streaming session: connections, producer and pipeline live and die together.
class Relay::Session {
 public:
  explicit Session(Relay& relay) : relay_(relay), config_(relay.config_), stats_(relay.stats_) {}
  // Members die in reverse order of declaration: the pipeline (which detaches its delivery
  // handler from the sink) before the sink, the sink before the connections.
  ~Session() {
    stats_.streaming.store(0);
    stats_.in_flight_events.store(0);
    stats_.in_flight_bytes.store(0);
  }

  Status Start();
  // Set when Start() found the slot read by another process (a relay that holds it: this
  // one stands by): that process's PID, 0 when the server did not say.
  const std::optional<int>& standby_for() const { return standby_for_; }
  // Who that process is, for the log: SlotAdmin::DescribeBackend ("pid 1234, application
  // 'walrelay' from 10.0.0.5:51234, connected ..."), or just the pid when it cannot be read.
  const std::string& standby_holder() const { return standby_holder_; }
  // Exactly-once mode: a newer producer of the stream's transactional.id fenced this
  // session's (a relay that took over); it stands down instead of retrying.
  bool fenced() const { return sink_ != nullptr && sink_->Fenced(); }
  // Stream() ended because Kafka acknowledged nothing for flow.kafka_wait_yield_ms
  // (Pipeline::yielded): the relay lets go of the slot for three standby intervals.
  bool yielded() const { return pipeline_ != nullptr && pipeline_->yielded(); }
  // The batch limit under which the broker refused a batch of several records, or 0.
  int64_t refused_batch_limit() const {
    return sink_ ? sink_->producer().refused_batch_limit() : 0;
  }
  Status Stream() {
    Status st = pipeline_->Run(relay_.stop_);
    if (st.ok()) st = SaveProgress();  // stopped cleanly: record the final progress
    if (!st.ok()) AbortOpenKafkaTransaction();
    return st;
  }

 private:
  // What Start() found wrong with the slot, when it recovers.
  enum class SlotCondition {
    kGone,        // missing
    kLost,        // invalidated (max_slot_wal_keep_size)
    kUntrusted,   // healthy, but confirmed past walrelay's recorded delivered position
    kUnfinished,  // healthy, made by a recovery or republish that did not finish
  };
  // Returns the position the slot streams from, all before which is delivered. `existing`:
  // the slot as Start() read it (null when gone).
  Result<Lsn> Recover(const slot::ConnInfo& conninfo, const Progress& progress,
                      SlotCondition condition, const slot::SlotInfo* existing);
  Status Tick();
  Status Heartbeat();
  // Exactly-once mode, a session that failed with a Kafka transaction open: abort it now
  // (the next session's producer init would), so that its records are never read, and so
  // that a relay resumed after a take-over learns here that it was fenced (fenced()).
  void AbortOpenKafkaTransaction();
  // Records the newest bound candidate the confirmed position has reached (recovery/backfill.h).
  Status SaveProgress();
  // Takes a bound candidate when events were handled since the last one (or when no bound
  // is recorded yet): an idle relay reads and writes nothing.
  Status TakeCandidate();

  Relay& relay_;
  const RelayConfig& config_;
  RelayStats& stats_;
  std::unique_ptr<slot::SlotAdmin> admin_;
  std::unique_ptr<slot::ReplicationConnection> conn_;
  std::unique_ptr<KafkaSink> sink_;
  std::unique_ptr<DeadLetterWriter> dead_letters_;
  std::unique_ptr<ProgressStore> progress_;
  std::unique_ptr<DeliveredRecorder> recorder_;  // over progress_
  std::unique_ptr<Pipeline> pipeline_;
  Clock::time_point next_heartbeat_ = Clock::now();
  Clock::time_point next_progress_save_ = Clock::now();
  // Snapshot bound candidates (recovery/backfill.h), oldest first, LSNs ascending.
  static constexpr size_t kMaxCandidates = 8;
  std::deque<SnapshotBound> candidates_;
  bool bound_recorded_ = false;       // the progress table holds a bound for the slot
  uint64_t events_at_candidate_ = 0;  // events handled when the last candidate was taken
  Clock::time_point next_candidate_ = Clock::now();
  std::chrono::milliseconds candidate_interval_{1000};  // the status interval
  std::optional<int> standby_for_;
  std::string standby_holder_;
  // Exactly-once mode: the transactional producer replaces sink_, and what the pipeline
  // needs (checkpoint, batcher) is set up (config.exactly_once).
  Status StartExactlyOnce();
  std::unique_ptr<Pipeline::Options::ExactlyOnce> exactly_once_;
  void StandBy(int pid);  // sets standby_for_ and standby_holder_
};

}  // namespace walrelay::relay
