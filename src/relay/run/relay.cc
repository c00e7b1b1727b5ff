#include "src/relay/run/relay.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <deque>
#include <optional>
#include <random>
#include <thread>

#include "slot/replication_connection.h"
#include "slot/slot_admin.h"
#include "slot/wire.h"
#include "src/kafka/mock_cluster.h"
#include "src/metrics/http_server.h"
#include "src/metrics/registry.h"
#include "src/relay/core/dead_letter.h"
#include "src/relay/core/metric_names.h"
#include "src/relay/core/pipeline.h"
#include "src/relay/lifecycle/janitor.h"
#include "src/relay/core/plugin_options.h"
#include "src/relay/polling/poller.h"
#include "src/relay/lifecycle/table_health.h"
#include "src/relay/core/progress.h"
#include "src/relay/recovery/backfill.h"
#include "src/relay/core/schema.h"
#include "src/relay/lifecycle/slot_guard.h"

namespace walrelay::relay {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Relay::Embedded {
  std::unique_ptr<kafka::MockCluster> cluster;
};

// Metrics, the slot guard and the HTTP endpoint: one set for the process, across sessions.
struct Relay::Observability {
  metrics::Registry registry;
  metrics::Histogram* produce_latency = nullptr;
  metrics::Histogram* commit_to_ack_latency = nullptr;
  metrics::Histogram* rows_per_poll = nullptr;  // poll mode only
  std::unique_ptr<SlotGuard> guard;
  std::unique_ptr<OutboxJanitor> janitor;  // null when outbox.retention_ms is 0
  std::unique_ptr<TableHealthMonitor> table_health;
  std::unique_ptr<metrics::MetricsServer> server;
};

namespace {

// Said at start and on /readyz while kafka.embedded is on.
constexpr std::string_view kEmbeddedKafkaWarning =
    "kafka.embedded is on: records live only in this process's memory and are lost when it "
    "exits, while the slot is confirmed past them; for development only, use "
    "--kafka-bootstrap-servers for anything that matters";

// Errors a new session cannot fix: Run() returns them instead of retrying.
bool Retryable(const Status& st) {
  switch (st.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kResourceExhausted:
    case StatusCode::kInternal:            // fatal producer error: a new producer fixes it
    case StatusCode::kNotFound:            // e.g. a topic not created yet: loud, retried
    case StatusCode::kFailedPrecondition:  // e.g. the slot is active for another reader
    case StatusCode::kCancelled:           // purged records: purges happen only to restart
      return true;
    default:
      return false;
  }
}

// CREATE_REPLICATION_SLOT for a slot found missing. 42710 (duplicate_object) means another
// relay created it in between: it streams the slot now, so wait and retry (kUnavailable);
// the next session finds the slot and waits while the other relay reads it.
Result<slot::CreatedSlot> CreateMissingSlot(slot::ReplicationConnection& conn,
                                            const RelayConfig& config, bool export_snapshot) {
  auto created =
      conn.CreateLogicalSlot(config.slot, config.plugin, /*temporary=*/false, export_snapshot);
  if (!created.ok() && created.status().code() == StatusCode::kAlreadyExists) {
    return UnavailableError(
        "replication slot " + config.slot +
        " was created by another session between this relay's check and its "
        "CREATE_REPLICATION_SLOT (another walrelay starting on the same slot?): waiting and "
        "retrying; this relay streams once the other one stops reading the slot (" +
        created.status().message() + ")");
  }
  return created;
}

}  // namespace

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
  // The batch limit under which the broker refused a batch of several records, or 0.
  int64_t refused_batch_limit() const {
    return sink_ ? sink_->producer().refused_batch_limit() : 0;
  }
  Status Stream() {
    Status st = pipeline_->Run(relay_.stop_);
    if (st.ok()) st = SaveProgress();  // stopped cleanly: record the final progress
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
  // Records the newest bound candidate the confirmed position has reached (recovery.h).
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
  std::unique_ptr<Pipeline> pipeline_;
  Clock::time_point next_heartbeat_ = Clock::now();
  Clock::time_point next_progress_save_ = Clock::now();
  // Snapshot bound candidates (recovery.h), oldest first, LSNs ascending.
  static constexpr size_t kMaxCandidates = 8;
  std::deque<SnapshotBound> candidates_;
  bool bound_recorded_ = false;       // the progress table holds a bound for the slot
  uint64_t events_at_candidate_ = 0;  // events handled when the last candidate was taken
  Clock::time_point next_candidate_ = Clock::now();
  milliseconds candidate_interval_{1000};  // the status interval
  std::optional<int> standby_for_;
};

Status Relay::Session::Start() {
  const slot::ConnInfo conninfo = config_.SourceConninfo();
  // Server checks and objects, over a normal connection.
  WALRELAY_ASSIGN_OR_RETURN(admin_, slot::SlotAdmin::Connect(conninfo));
  WALRELAY_ASSIGN_OR_RETURN(slot::ServerSettings settings, admin_->GetServerSettings());
  WALRELAY_RETURN_IF_ERROR(slot::RequireLogicalWalLevel(settings));
  // Everything from reading the slot's state to streaming it happens under the slot's lock
  // (slot_admin.h): another relay of the slot that is starting or recovering it (it may
  // have just made the slot anew and be republishing, the slot inactive and the recovery
  // marked unfinished) is waited for as a standby, never taken for a crashed one.
  WALRELAY_ASSIGN_OR_RETURN(const bool locked, admin_->TryLockSlot(config_.slot));
  if (!locked) {
    auto holder = admin_->SlotLockHolder(config_.slot);
    standby_for_ = holder.ok() ? holder->value_or(0) : 0;
    return UnavailableError("replication slot " + config_.slot +
                            " is being started or recovered by process " +
                            std::to_string(*standby_for_) + " (it holds the slot's lock)");
  }
  // The slot, read before anything else is set up: while another process streams it (the
  // active relay, this one being a standby), PostgreSQL lets no one else read it.
  auto existing = admin_->GetSlot(config_.slot);
  if (!existing.ok() && existing.status().code() != StatusCode::kNotFound) {
    return existing.status();
  }
  if (existing.ok() && existing->active) {
    standby_for_ = existing->active_pid.value_or(0);
    return UnavailableError("replication slot " + config_.slot + " is held by process " +
                            std::to_string(*standby_for_));
  }
  const milliseconds status_interval =
      std::min(config_.status_interval, slot::StatusInterval(settings.wal_sender_timeout));
  // The outbox tables, resolved to OIDs by the server once per session: the stream's
  // relations are matched by these (invariant 8).
  std::vector<OutboxTable> outbox_tables;
  if (!config_.tables.empty()) {
    std::vector<slot::ResolvedTable> resolved;
    if (config_.create_slot) {
      WALRELAY_ASSIGN_OR_RETURN(resolved,
                                admin_->EnsurePublication(config_.publication, config_.tables));
    } else {
      WALRELAY_ASSIGN_OR_RETURN(resolved, admin_->ResolveTables(config_.tables));
      WALRELAY_ASSIGN_OR_RETURN(slot::PublicationCheck check,
                                admin_->CheckPublication(config_.publication, resolved));
      WALRELAY_RETURN_IF_ERROR(check.Verdict(config_.publication, /*may_create=*/false));
    }
    for (const slot::ResolvedTable& t : resolved) {
      outbox_tables.push_back({t.oid, t.schema, t.name});
    }
  }
  WALRELAY_ASSIGN_OR_RETURN(
      dead_letters_, DeadLetterWriter::Open(conninfo, config_.dead_letter_table, config_.slot));
  WALRELAY_ASSIGN_OR_RETURN(progress_, ProgressStore::Open(conninfo, config_.progress_table));
  WALRELAY_ASSIGN_OR_RETURN(Progress progress, progress_->Load(config_.slot));
  if (config_.recovery_enabled && config_.tables.empty()) {
    return InvalidArgumentError(
        "--recovery-enabled is true but no --source-table is configured: lost-slot recovery "
        "republishes from outbox tables, and table-less events (logical messages) in WAL "
        "that a lost slot gave up can never be republished. Configure the outbox tables, or "
        "set --recovery-enabled false to run knowingly without recovery");
  }
  bound_recorded_ = progress.bound.has_value();
  events_at_candidate_ = stats_.events_produced.load() + stats_.events_dead_lettered.load();

  // The producer.
  WALRELAY_ASSIGN_OR_RETURN(sink_, KafkaSink::Create(relay_.ProducerOptions()));

  // The replication connection and the slot: existing, new, or recovered.
  // Connect forces replication=database (appending it as text would break a URI DSN).
  WALRELAY_ASSIGN_OR_RETURN(conn_, slot::ReplicationConnection::Connect(conninfo));
  const bool missing = !existing.ok();
  const bool lost = existing.ok() && existing->invalidated();
  if (existing.ok() && !existing->plugin.empty() && existing->plugin != config_.plugin) {
    return InvalidArgumentError("replication slot " + config_.slot + " uses plugin " +
                                existing->plugin + ", but --source-plugin is " + config_.plugin);
  }
  // The slot's trust (invariant 11): walrelay records a position before it confirms the
  // slot up to it (Pipeline::Options::record_confirmable), so a slot confirmed past the
  // recorded position was not advanced by walrelay: made anew after the one it streamed
  // was dropped or lost (by setup, by hand, by another tool), and missing the events
  // between. It is recovered like a lost slot, or refused.
  const bool untrusted =
      existing.ok() && !lost && !progress.Vouches(existing->confirmed_flush_lsn);
  Lsn delivered;  // where the confirmation gate starts: the slot's trusted position
  if (progress.recovering || ((missing || lost || untrusted) && progress.exists)) {
    const SlotCondition condition = missing     ? SlotCondition::kGone
                                    : lost      ? SlotCondition::kLost
                                    : untrusted ? SlotCondition::kUntrusted
                                                : SlotCondition::kUnfinished;
    WALRELAY_ASSIGN_OR_RETURN(delivered, Recover(conninfo, progress, condition,
                                                 existing.ok() ? &*existing : nullptr));
  } else if (missing) {
    if (!config_.create_slot) {
      return FailedPreconditionError("replication slot " + config_.slot +
                                     " does not exist: run `walrelay setup` or set "
                                     "--source-create-slot true");
    }
    WALRELAY_ASSIGN_OR_RETURN(auto created, CreateMissingSlot(*conn_, config_, false));
    spdlog::info("created logical slot {} at {}", config_.slot,
                 created.consistent_point.ToString());
    delivered = created.consistent_point;
    WALRELAY_RETURN_IF_ERROR(progress_->SaveDelivered(config_.slot, delivered));
    WALRELAY_RETURN_IF_ERROR(progress_->SaveSlotOrigin(config_.slot, "run"));
  } else if (lost) {
    // No session can fix this: DataLoss ends Run() instead of retrying.
    return DataLossError(
        "replication slot " + config_.slot + " is " +
        slot::ExplainSlotInvalidation(existing->invalidation_reason) +
        "; no walrelay progress is recorded for it, so the events it had not delivered are "
        "unknown and recovery cannot republish them. Fix: drop the slot (SELECT "
        "pg_drop_replication_slot(" +
        QuoteLiteral(config_.slot) +
        ")), run `walrelay republish --all --create-slot` (it makes the slot anew and "
        "republishes the outbox rows; docs/operations.md, section 2) and start walrelay "
        "again");
  } else if (progress.delivered) {
    delivered = *progress.delivered;
  } else {
    // A slot walrelay never streamed (setup made it, or a Debezium slot taken over), or
    // a progress table of a version that did not record the position: trusted as it is.
    delivered = existing->confirmed_flush_lsn.value_or(Lsn());
    WALRELAY_RETURN_IF_ERROR(progress_->SaveDelivered(config_.slot, delivered));
    if (progress.slot_origin.empty()) {
      WALRELAY_RETURN_IF_ERROR(progress_->SaveSlotOrigin(config_.slot, "adopted"));
    }
    spdlog::info("replication slot {}: adopted at its confirmed position {} (walrelay confirms "
                 "it no further than it recorded as delivered from now on)",
                 config_.slot, delivered.ToString());
  }

  Pipeline::Options pipeline_options;
  pipeline_options.status_interval = status_interval;
  candidate_interval_ = status_interval;
  pipeline_options.tick = [this] { return Tick(); };
  pipeline_options.produce_latency = relay_.obs_->produce_latency;
  pipeline_options.commit_to_ack_latency = relay_.obs_->commit_to_ack_latency;
  pipeline_options.outbox_tables = std::move(outbox_tables);
  pipeline_options.topic_errors = relay_.topic_errors_.get();
  pipeline_options.confirm_limit = delivered;
  pipeline_options.record_confirmable = [this](Lsn lsn) {
    return progress_->SaveDelivered(config_.slot, lsn);
  };
  pipeline_ = std::make_unique<Pipeline>(config_, stats_, *conn_, *sink_, *dead_letters_,
                                         std::move(pipeline_options));

  const PluginOptions options =
      StartReplicationOptions(config_.plugin, config_.publication, config_.tables);
  if (Status started = conn_->StartLogical(config_.slot, Lsn(0), options); !started.ok()) {
    // Another relay may have taken the slot since it was read above.
    auto now = admin_->GetSlot(config_.slot);
    if (now.ok() && now->active) standby_for_ = now->active_pid.value_or(0);
    return started;
  }
  // Streaming: the slot is active, which keeps every other relay standing by.
  WALRELAY_RETURN_IF_ERROR(admin_->UnlockSlot(config_.slot));
  stats_.streaming.store(1);
  if (const int was_standby_for = stats_.standby_for.exchange(0); stats_.standby.exchange(0)) {
    spdlog::warn("took over slot {}: the process that read it ({}) stopped; this relay streams "
                 "it now",
                 config_.slot, was_standby_for);
  }
  if (!relay_.guard_started_) {  // now that the slot exists
    relay_.obs_->guard->Start();
    if (relay_.obs_->janitor) relay_.obs_->janitor->Start();
    relay_.obs_->table_health->Start();
    relay_.guard_started_ = true;
  }
  spdlog::info("streaming slot {} (publication {}), status every {} ms", config_.slot,
               config_.publication, status_interval.count());
  return Status::Ok();
}

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

// Runs about every 100 ms on the pipeline's thread: heartbeats and progress saving.
Status Relay::Session::Tick() {
  stats_.loop_ticks.fetch_add(1, std::memory_order_relaxed);
  if (config_.heartbeat_interval.count() > 0) WALRELAY_RETURN_IF_ERROR(Heartbeat());
  if (Clock::now() >= next_candidate_) WALRELAY_RETURN_IF_ERROR(TakeCandidate());
  if (Clock::now() >= next_progress_save_) WALRELAY_RETURN_IF_ERROR(SaveProgress());
  return Status::Ok();
}

Status Relay::Session::TakeCandidate() {
  const uint64_t events = stats_.events_produced.load() + stats_.events_dead_lettered.load();
  if (events == events_at_candidate_ && (bound_recorded_ || !candidates_.empty())) {
    return Status::Ok();
  }
  next_candidate_ = Clock::now() + candidate_interval_;
  WALRELAY_ASSIGN_OR_RETURN(SnapshotBound candidate, progress_->ReadCandidate());
  events_at_candidate_ = events;
  if (candidates_.size() < kMaxCandidates) {
    candidates_.push_back(std::move(candidate));
  } else {
    candidates_.back() = std::move(candidate);  // keeps the oldest ones, which ripen first
  }
  return Status::Ok();
}

Status Relay::Session::SaveProgress() {
  next_progress_save_ = Clock::now() + std::chrono::seconds(2);
  const Lsn confirmed = pipeline_->confirmed_lsn();
  std::optional<SnapshotBound> reached;
  while (!candidates_.empty() && candidates_.front().lsn <= confirmed) {
    reached = std::move(candidates_.front());
    candidates_.pop_front();
  }
  if (!reached) return Status::Ok();
  WALRELAY_RETURN_IF_ERROR(progress_->SaveBound(config_.slot, *reached));
  bound_recorded_ = true;
  return Status::Ok();
}

// Emits a non-transactional logical message carrying the wall clock; seen in the stream it
// gives the end-to-end lag and keeps positions moving on an otherwise idle database.
Status Relay::Session::Heartbeat() {
  if (Clock::now() < next_heartbeat_) return Status::Ok();
  next_heartbeat_ = Clock::now() + config_.heartbeat_interval;
  const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  Status st =
      admin_->EmitMessage(/*transactional=*/false, kHeartbeatPrefix, std::to_string(now_us));
  if (!st.ok()) return st.WithContext("heartbeat");
  stats_.heartbeats_sent.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Relay::Relay(RelayConfig config) : config_(std::move(config)) {}
Relay::~Relay() = default;

kafka::ProducerOptions Relay::ProducerOptions() const {
  kafka::ProducerOptions popts;
  popts.properties.emplace_back("bootstrap.servers", bootstrap_servers());
  for (const auto& [k, v] : config_.kafka_properties) popts.properties.emplace_back(k, v);
  if (kafka_batch_size_ > 0) {
    popts.properties.emplace_back("batch.size", std::to_string(kafka_batch_size_));
  }
  popts.on_client_error = [errors = kafka_client_errors_.get(), acked = &stats_.events_acked](
                              const Status& why) { errors->Fail(why, acked->load()); };
  return popts;
}

Status Relay::PollSession() {
  const slot::ConnInfo conninfo = config_.SourceConninfo();
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgConnPtr conn,
      slot::ConnectPg(conninfo, nullptr, "poll connection", slot::kRelaySession));
  if (!transport_warned_) {  // once per process, as the WAL mode's startup checks do
    if (std::string w = slot::TransportSecurityWarning(conn.get()); !w.empty()) {
      spdlog::warn("startup check: {}", w);
    }
    transport_warned_ = true;
  }
  WALRELAY_ASSIGN_OR_RETURN(auto dead_letters,
                            DeadLetterWriter::Open(conninfo, config_.dead_letter_table,
                                                   PollDeadLetterSlot(config_)));
  WALRELAY_ASSIGN_OR_RETURN(auto sink, KafkaSink::Create(ProducerOptions()));
  Poller poller(config_, conn.get(), *sink, *dead_letters, stats_, obs_->rows_per_poll,
                obs_->produce_latency);
  WALRELAY_RETURN_IF_ERROR(poller.Prepare());
  struct Polling {
    RelayStats& stats;
    ~Polling() { stats.polling.store(0); }
  } polling{stats_};
  stats_.polling.store(1);
  if (!guard_started_) {
    if (obs_->janitor) obs_->janitor->Start();
    obs_->table_health->Start();
    guard_started_ = true;
  }
  spdlog::info("polling {} every {} ms when idle, {} rows per transaction{}",
               [&] {
                 std::string t;
                 for (const auto& name : config_.tables) t += (t.empty() ? "" : ", ") + name;
                 return t;
               }(),
               config_.poll_interval.count(), config_.poll_batch_rows,
               config_.poll_shard.empty() ? "" : ", shard " + config_.poll_shard);
  Clock::time_point next_backlog = Clock::now();
  while (!stop_.load()) {
    if (Clock::now() >= next_backlog) {
      next_backlog = Clock::now() + std::min(config_.guard_interval, milliseconds(5000));
      WALRELAY_ASSIGN_OR_RETURN(PollBacklog backlog, poller.ReadBacklog());
      stats_.poll_backlog_rows.store(backlog.rows);
      stats_.poll_retrying_rows.store(backlog.retrying_rows);
      stats_.poll_oldest_age_ms.store(static_cast<int64_t>(backlog.oldest_age_seconds * 1000));
    }
    WALRELAY_ASSIGN_OR_RETURN(uint64_t handled, poller.PollOnce(stop_));
    stats_.loop_ticks.fetch_add(1, std::memory_order_relaxed);
    if (handled != 0) continue;
    for (auto until = Clock::now() + config_.poll_interval; Clock::now() < until && !stop_.load();) {
      std::this_thread::sleep_for(milliseconds(std::min<int64_t>(20, config_.poll_interval.count())));
      stats_.loop_ticks.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return Status::Ok();
}

std::string Relay::bootstrap_servers() const {
  if (embedded_) return embedded_->cluster->bootstraps();
  return config_.bootstrap_servers;
}

Status Relay::StartObservability() {
  namespace mn = metric_names;
  obs_ = std::make_unique<Observability>();
  topic_errors_ = std::make_unique<TopicErrors>(config_.kafka_topic_error_timeout);
  metrics::Registry& r = obs_->registry;
  auto counter = [&r](const mn::MetricName& m, const std::atomic<uint64_t>& a,
                      metrics::Labels labels = {}) {
    r.AddCounterCallback(m.name, m.help, labels,
                         [&a] { return static_cast<double>(a.load(std::memory_order_relaxed)); });
  };
  auto gauge = [&r](const mn::MetricName& m, const auto& a) {
    r.AddGaugeCallback(m.name, m.help, {},
                       [&a] { return static_cast<double>(a.load(std::memory_order_relaxed)); });
  };
  counter(mn::kEventsProduced, stats_.events_produced);
  counter(mn::kEventsPublished, stats_.events_acked);
  counter(mn::kEventsDeadLettered, stats_.events_dead_lettered);
  counter(mn::kDeadLetterWriteFailures, stats_.dead_letter_write_failures);
  counter(mn::kEventsSkipped, stats_.skipped_updates, {{"kind", "update"}});
  counter(mn::kEventsSkipped, stats_.skipped_deletes, {{"kind", "delete"}});
  counter(mn::kEventsSkipped, stats_.skipped_truncates, {{"kind", "truncate"}});
  counter(mn::kEventsSkipped, stats_.skipped_messages, {{"kind", "message"}});
  counter(mn::kEventsSkipped, stats_.skipped_other_tables, {{"kind", "other_table"}});
  counter(mn::kTransactions, stats_.transactions);
  counter(mn::kReceivedBytes, stats_.bytes_received);
  counter(mn::kRestarts, stats_.restarts);
  counter(mn::kHeartbeatsSent, stats_.heartbeats_sent);
  counter(mn::kHeartbeatsReceived, stats_.heartbeats);
  counter(mn::kSlotRecoveries, stats_.slot_recoveries);
  gauge(mn::kRecovering, stats_.recovering);
  r.AddGaugeCallback(mn::kRecoveryRowsRemaining.name, mn::kRecoveryRowsRemaining.help, {}, [this] {
    if (stats_.recovering.load() == 0) return 0.0;
    const uint64_t expected = stats_.recovery_rows_expected.load();
    const uint64_t done = stats_.recovery_rows_done.load();
    return expected > done ? static_cast<double>(expected - done) : 0.0;
  });
  gauge(mn::kInFlightEvents, stats_.in_flight_events);
  gauge(mn::kInFlightBytes, stats_.in_flight_bytes);
  gauge(mn::kFlushLsn, stats_.flush_lsn);
  gauge(mn::kReceivedLsn, stats_.received_lsn);
  gauge(mn::kServerWalEndLsn, stats_.server_wal_end);
  gauge(mn::kStreaming, stats_.streaming);
  gauge(mn::kStandby, stats_.standby);
  gauge(mn::kKafkaBatchSize, stats_.kafka_batch_size);
  r.AddGaugeCallback(mn::kKafkaFailingTopics.name, mn::kKafkaFailingTopics.help, {},
                     [this] { return static_cast<double>(topic_errors_->failing()); });
  r.AddCounterCallback(mn::kKafkaClientErrors.name, mn::kKafkaClientErrors.help, {}, [this] {
    return static_cast<double>(kafka_client_errors_->total());
  });
  r.AddGaugeCallback(mn::kFlushLagBytes.name, mn::kFlushLagBytes.help, {}, [this] {
    const uint64_t end = stats_.server_wal_end.load(), flush = stats_.flush_lsn.load();
    return end > flush ? static_cast<double>(end - flush) : 0.0;
  });
  r.AddGaugeCallback(mn::kOldestUnconfirmedEvent.name, mn::kOldestUnconfirmedEvent.help, {}, [this] {
    const int64_t commit_us = stats_.oldest_unconfirmed_commit_us.load();
    if (commit_us == 0) return 0.0;
    const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    return std::max<int64_t>(0, now_us - commit_us) / 1e6;
  });
  r.AddGaugeCallback(mn::kHeartbeatLag.name, mn::kHeartbeatLag.help, {}, [this] {
    const int64_t us = stats_.heartbeat_lag_us.load();
    return us < 0 ? -1.0 : us / 1e6;
  });
  obs_->produce_latency = &r.AddHistogram(mn::kProduceLatency.name, mn::kProduceLatency.help,
                                          metrics::DefaultLatencyBuckets());
  if (config_.source_mode == SourceMode::kPoll) {
    gauge(mn::kPolling, stats_.polling);
    counter(mn::kPollFailedPublishes, stats_.poll_failed_produces);
    gauge(mn::kPollBacklogRows, stats_.poll_backlog_rows);
    gauge(mn::kPollRetryingRows, stats_.poll_retrying_rows);
    r.AddGaugeCallback(mn::kPollOldestUnpublished.name, mn::kPollOldestUnpublished.help, {},
                       [this] { return stats_.poll_oldest_age_ms.load() / 1000.0; });
    obs_->rows_per_poll = &r.AddHistogram(mn::kPollRows.name, mn::kPollRows.help,
                                          {0, 1, 5, 10, 25, 50, 100, 200, 500, 1000, 10000});
  }
  obs_->commit_to_ack_latency = &r.AddHistogram(
      mn::kCommitToAckLatency.name, mn::kCommitToAckLatency.help, metrics::DefaultLatencyBuckets());

  WALRELAY_ASSIGN_OR_RETURN(Threshold warn, Threshold::Parse(config_.guard_warn));
  WALRELAY_ASSIGN_OR_RETURN(Threshold critical, Threshold::Parse(config_.guard_critical));
  SlotGuardOptions gopts;
  gopts.conninfo = config_.SourceConninfo();
  gopts.slot = config_.slot;
  gopts.warn = warn;
  gopts.critical = critical;
  gopts.interval = config_.guard_interval;
  gopts.registry = &r;
  obs_->guard = std::make_unique<SlotGuard>(std::move(gopts));  // started with streaming
  {
    std::vector<HealthTable> health_tables;
    for (const std::string& t : config_.tables) health_tables.emplace_back(t, config_.columns.created_at);
    health_tables.emplace_back(config_.dead_letter_table);  // no index on dead_at
    obs_->table_health = std::make_unique<TableHealthMonitor>(
        config_.SourceConninfo(), std::move(health_tables), config_.guard_interval, &r);
  }
  if (config_.outbox_retention.count() > 0) {
    JanitorOptions jopts;
    jopts.conninfo = config_.SourceConninfo();
    jopts.slot = config_.slot;
    jopts.progress_table = config_.progress_table;
    jopts.tables = config_.tables;
    jopts.created_at_column = config_.columns.created_at;
    jopts.retention = config_.outbox_retention;
    jopts.batch_rows = static_cast<int>(config_.janitor_batch_rows);
    jopts.interval = config_.janitor_interval;
    jopts.poll_mode = config_.source_mode == SourceMode::kPoll;
    jopts.cleanup = config_.outbox_cleanup;
    jopts.period = config_.partition_period;
    obs_->janitor = std::make_unique<OutboxJanitor>(std::move(jopts));  // started with streaming
    OutboxJanitor* janitor = obs_->janitor.get();
    r.AddCounterCallback(mn::kJanitorDeleted.name, mn::kJanitorDeleted.help, {},
                         [janitor] { return static_cast<double>(janitor->deleted()); });
    r.AddCounterCallback(mn::kJanitorFailures.name, mn::kJanitorFailures.help, {},
                         [janitor] { return static_cast<double>(janitor->failures()); });
    r.AddCounterCallback(mn::kJanitorDroppedPartitions.name, mn::kJanitorDroppedPartitions.help,
                         {}, [janitor] { return static_cast<double>(janitor->dropped_partitions()); });
  }

  if (!config_.metrics_address.empty()) {
    metrics::ServerOptions so;
    so.address = config_.metrics_address;
    so.ready = [this]() -> Status {
      if (Status topics = topic_errors_->Readiness(); !topics.ok()) return topics;
      if (Status kafka = kafka_client_errors_->Readiness(stats_.events_acked.load());
          !kafka.ok()) {
        return kafka;
      }
      if (config_.source_mode == SourceMode::kPoll) {
        if (stats_.polling.load() == 0) return UnavailableError("not polling");
        return Status::Ok();
      }
      if (stats_.standby.load() != 0) {
        return UnavailableError("standby: replication slot " + config_.slot +
                                " is held by process " +
                                std::to_string(stats_.standby_for.load()) +
                                "; this relay takes over when it stops");
      }
      if (stats_.recovering.load() != 0) {
        return UnavailableError(
            "recovering replication slot " + config_.slot + ": republished " +
            std::to_string(stats_.recovery_rows_done.load()) + " of " +
            std::to_string(stats_.recovery_rows_expected.load()) +
            " rows from the outbox tables (progress every 10 s in the log); streams once done");
      }
      if (stats_.streaming.load() == 0) return UnavailableError("not streaming");
      const SlotState state = obs_->guard->state();
      if (SlotStateSeverity(state) >= 2) {
        return UnavailableError("slot " + config_.slot + " is " +
                                std::string(SlotStateName(state)));
      }
      return Status::Ok();
    };
    if (config_.embedded_kafka) so.note = [] { return std::string(kEmbeddedKafkaWarning); };
    WALRELAY_ASSIGN_OR_RETURN(obs_->server, metrics::MetricsServer::Start(&r, so));
    spdlog::info("metrics on http://{}/metrics (also /healthz, /readyz)", config_.metrics_address);
  }
  return Status::Ok();
}

std::string Relay::RenderMetrics() const { return obs_ ? obs_->registry.Render() : ""; }

int Relay::metrics_port() const { return obs_ && obs_->server ? obs_->server->port() : 0; }

Status Relay::Run() {
  if (config_.embedded_kafka && !embedded_) {
    WALRELAY_ASSIGN_OR_RETURN(auto cluster, kafka::MockCluster::Create(3));
    embedded_ = std::make_unique<Embedded>();
    embedded_->cluster = std::move(cluster);
    spdlog::warn("embedded Kafka (librdkafka mock cluster) at {}: {}",
                 embedded_->cluster->bootstraps(), kEmbeddedKafkaWarning);
  }
  if (!obs_) WALRELAY_RETURN_IF_ERROR(StartObservability());
  if (config_.outbox_cleanup == OutboxCleanup::kSameTransaction) {
    spdlog::warn(
        "outbox.cleanup same-transaction: writers delete each outbox row in the transaction "
        "that inserted it, so lost-slot recovery is off (there is nothing to republish "
        "from): if slot {} is lost (max_slot_wal_keep_size) or dropped, the events it had "
        "not delivered are gone and walrelay stops with exit 3. Keep it read: alert on "
        "walrelay_slot_retained_bytes and walrelay_slot_state",
        config_.slot);
  }
  std::mt19937_64 rng(std::random_device{}());
  milliseconds backoff = config_.reconnect_min;
  bool checked = false;
  Status result;
  while (!stop_.load()) {
    Status st;
    const bool poll = config_.source_mode == SourceMode::kPoll;
    if (poll) {
      st = PollSession();
      if (st.ok()) break;  // stopped on request
    } else {
      if (!checked) {
        // Once: settings and privileges, with the documented fix in each message.
        StartupCheckOptions sco;
        sco.lost_slot_is_error = !config_.recovery_enabled;
        sco.warn = obs_->guard->options().warn;
        sco.critical = obs_->guard->options().critical;
        auto report = StartupChecks(config_, sco);
        st = report.status();
        if (st.ok()) checked = true;
        if (!st.ok() && st.code() != StatusCode::kUnavailable) {
          spdlog::error("{}", st.ToString());
          result = st;
          break;
        }
      }
      std::optional<int> standby_for;
      if (st.ok()) {
        Session session(*this);
        st = session.Start();
        standby_for = session.standby_for();
        if (st.ok()) {
          const auto streaming_since = Clock::now();
          st = session.Stream();
          if (st.ok()) break;  // stopped on request
          // A session that streamed a while starts the backoff anew; one that fails at once
          // again (e.g. on an event whose topic is being retried) keeps backing off.
          if (Clock::now() - streaming_since >= std::chrono::seconds(10)) {
            backoff = config_.reconnect_min;
          }
        }
        if (const int64_t refused = session.refused_batch_limit(); refused > 0) {
          // The broker refused a batch of records (the topic's max.message.bytes is below
          // the batch, or it refused one record in it): smaller batches from now on, until
          // a record travels alone and is judged by itself.
          kafka_batch_size_ = std::max<int64_t>(1, refused / 2);
          stats_.kafka_batch_size.store(kafka_batch_size_);
          spdlog::warn(
              "the broker refused a batch of {} bytes; the next session produces with "
              "batch.size={} (raise the topic's max.message.bytes or set --kafka-property "
              "batch.size to avoid the restarts)",
              refused, kafka_batch_size_);
        }
      }
      if (standby_for) {
        // Standing by: another process holds the slot. Retry at the standby interval (not
        // the growing reconnect backoff), so this relay takes over within about two
        // intervals of the active one stopping; say so once, not at every retry.
        if (!stats_.standby.exchange(1) || stats_.standby_for.load() != *standby_for) {
          spdlog::warn(
              "standing by: replication slot {} is held by process {} (another walrelay "
              "streaming, starting or recovering it, or another client); retrying every {} ms "
              "and taking over when it stops. /readyz says standby meanwhile",
              config_.slot, *standby_for, config_.standby_interval.count());
        }
        stats_.standby_for.store(*standby_for);
        backoff = config_.reconnect_min;
        const int64_t base = config_.standby_interval.count();
        milliseconds delay(std::uniform_int_distribution<int64_t>(base * 4 / 5, base * 6 / 5)(rng));
        for (auto until = Clock::now() + delay; Clock::now() < until && !stop_.load();) {
          std::this_thread::sleep_for(milliseconds(20));
          stats_.loop_ticks.fetch_add(1, std::memory_order_relaxed);
        }
        continue;
      }
    }
    stats_.standby.store(0);
    if (!Retryable(st)) {
      spdlog::error("{}", st.ToString());
      result = st;
      break;
    }
    stats_.restarts.fetch_add(1);
    milliseconds delay(
        std::uniform_int_distribution<int64_t>(backoff.count() / 2, backoff.count())(rng));
    spdlog::warn("{} failed: {}; {} in {} ms", poll ? "poll session" : "session", st.ToString(),
                 poll ? "rolled back (its rows stay unpublished and are published again: "
                        "consumers may see duplicates, nothing is lost); restarting"
                      : "restarting from the slot's confirmed position",
                 delay.count());
    backoff = std::min(backoff * 2, config_.reconnect_max);
    for (auto until = Clock::now() + delay; Clock::now() < until && !stop_.load();) {
      std::this_thread::sleep_for(milliseconds(20));
      stats_.loop_ticks.fetch_add(1, std::memory_order_relaxed);
    }
  }
  obs_->guard->Stop();
  if (obs_->janitor) obs_->janitor->Stop();
  obs_->table_health->Stop();
  if (obs_->server) obs_->server->Stop();
  return result;
}

}  // namespace walrelay::relay
