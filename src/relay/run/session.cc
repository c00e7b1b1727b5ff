#include "src/relay/run/session.h"

#include <spdlog/spdlog.h>

#include "base/sql.h"
#include "slot/server_version.h"
#include "src/kafka/latest_value.h"
#include "src/relay/run/startup_checks.h"
#include "src/relay/core/exactly_once.h"
#include "slot/wire.h"
#include "src/relay/core/plugin_options.h"
#include "src/relay/core/schema.h"
#include "src/relay/run/observability.h"

namespace walrelay::relay {

using std::chrono::milliseconds;

// CREATE_REPLICATION_SLOT for a slot found missing. 42710 (duplicate_object) means another
// relay created it in between: it streams the slot now, so wait and retry (kUnavailable);
// the next session finds the slot and waits while the other relay reads it.
Result<slot::CreatedSlot> CreateMissingSlot(slot::ReplicationConnection& conn,
                                            const RelayConfig& config, bool export_snapshot) {
  auto created = conn.CreateLogicalSlot(config.slot, config.plugin, /*temporary=*/false,
                                        export_snapshot,
                                        config.WantsFailoverSlot(conn.server_version()));
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

Status Relay::Session::StartExactlyOnce() {
  constexpr std::chrono::seconds kKafkaTimeout{30};
  WALRELAY_ASSIGN_OR_RETURN(slot::SystemIdentity system, conn_->IdentifySystem());
  const StreamIdentity stream{system.system_id, system.dbname, config_.slot};
  const std::string id = config_.kafka_transactional_id.empty() ? stream.TransactionalId()
                                                                : config_.kafka_transactional_id;
  kafka::ProducerOptions options = relay_.ProducerOptions();
  const auto properties = options.properties;
  options.transactional_id = id;
  // The idempotent producer served a recovery's republishing, if any (acknowledged by now).
  sink_.reset();
  WALRELAY_ASSIGN_OR_RETURN(sink_, KafkaSink::Create(std::move(options)));
  // Fences any earlier producer of the stream and ends what it left open, before the
  // checkpoint is read (an open transaction would hold the reader back).
  WALRELAY_RETURN_IF_ERROR(sink_->producer().InitTransactions(kKafkaTimeout));
  auto value = kafka::LatestCommittedValue(properties, config_.checkpoint_topic, stream.Key(),
                                           kKafkaTimeout);
  if (!value.ok() && value.status().code() == StatusCode::kNotFound) {
    return FailedPreconditionError(CheckpointTopicMissing(config_.checkpoint_topic));
  }
  if (!value.ok()) return value.status().WithContext("exactly-once: reading the checkpoint");
  std::optional<Checkpoint> checkpoint;
  if (value->has_value()) {
    checkpoint = ParseCheckpoint(**value);
    if (!checkpoint) {
      return FailedPreconditionError(
          "exactly-once: the checkpoint of stream " + stream.Key() + " in topic " +
          config_.checkpoint_topic + " is not one walrelay wrote ('" + **value +
          "'); nothing was published. Something else writes that key: use another "
          "checkpoint topic");
    }
  }
  WALRELAY_ASSIGN_OR_RETURN(Lsn wal_end, admin_->CurrentWalLsn());
  exactly_once_ = std::make_unique<Pipeline::Options::ExactlyOnce>();
  exactly_once_->batcher = TransactionBatcher(config_.kafka_transaction_interval, 100000);
  exactly_once_->resume = DecideResume(checkpoint, wal_end, config_.checkpoint_topic, stream);
  if (exactly_once_->resume.kind == ResumeDecision::Kind::kRefuse) {
    return FailedPreconditionError("exactly-once: " + exactly_once_->resume.message);
  }
  if (ArmedRelayFailpoint() == RelayFailpoint::kIgnoreCheckpoint) {
    exactly_once_->resume = ResumeDecision{};  // the test failpoint: publish it all again
  }
  if (auto t = config_.kafka_properties.find("transaction.timeout.ms");
      t != config_.kafka_properties.end()) {
    exactly_once_->transaction_timeout = milliseconds(std::strtoll(t->second.c_str(), nullptr, 10));
  }
  exactly_once_->transaction_records = relay_.obs_->transaction_records;
  exactly_once_->commit_latency = relay_.obs_->transaction_commit_latency;
  exactly_once_->checkpoint_topic = config_.checkpoint_topic;
  exactly_once_->checkpoint_key = stream.Key();
  spdlog::info("exactly-once: transactional.id {}, checkpoint {} in {}: {}", id, stream.Key(),
               config_.checkpoint_topic,
               checkpoint ? "source transactions through " + checkpoint->commit_lsn.ToString() +
                                " are in Kafka and are skipped"
                          : std::string("none yet"));
  return Status::Ok();
}

void Relay::Session::AbortOpenKafkaTransaction() {
  if (!exactly_once_ || !pipeline_ || !pipeline_->kafka_transaction_open() || !sink_) return;
  Status aborted = sink_->producer().AbortTransaction(std::chrono::seconds(5));
  if (aborted.ok()) {
    spdlog::info("exactly-once: aborted the open Kafka transaction; its records are never read, "
                 "the next session sends its source transactions again");
  } else if (!sink_->Fenced()) {
    spdlog::info("exactly-once: the open Kafka transaction could not be aborted now ({}); the "
                 "next session's producer init aborts it", aborted.message());
  }
}

void Relay::Session::StandBy(int pid) {
  standby_for_ = pid;
  standby_holder_ = "process " + std::to_string(pid);
  if (pid == 0) return;
  // The walsender's or lock holder's pid alone sends the operator to pg_stat_activity.
  auto who = admin_->DescribeBackend(pid);
  if (who.ok()) standby_holder_ = "the backend of " + *who;
}

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
    StandBy(holder.ok() ? holder->value_or(0) : 0);
    return UnavailableError("replication slot " + config_.slot +
                            " is being started or recovered by " + standby_holder_ +
                            " (it holds the slot's lock)");
  }
  // The slot, read before anything else is set up: while another process streams it (the
  // active relay, this one being a standby), PostgreSQL lets no one else read it.
  auto existing = admin_->GetSlot(config_.slot);
  if (!existing.ok() && existing.status().code() != StatusCode::kNotFound) {
    return existing.status();
  }
  if (existing.ok() && existing->active) {
    StandBy(existing->active_pid.value_or(0));
    return UnavailableError("replication slot " + config_.slot + " is streamed by " +
                            standby_holder_);
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
    // Rows already in the outbox were committed before the slot and are not in its stream.
    // Delivered by something else before (a poll-mode relay, a connector), they are no
    // loss; never published, they are, and only a republish sends them: say so.
    for (const OutboxTable& t : outbox_tables) {
      const std::string name = QuoteIdentifier(t.schema) + "." + QuoteIdentifier(t.name);
      // A warning only: a failed count (a statement timeout on a bloated table) says so and
      // does not end the session.
      auto counted = admin_->CountRowsUpTo(name, 1001);
      if (!counted.ok()) {
        spdlog::warn("could not count the rows already in {}.{} (committed before slot {} "
                     "existed, so not in its stream): {}",
                     t.schema, t.name, config_.slot, counted.status().ToString());
        continue;
      }
      const int64_t rows = *counted;
      if (rows == 0) continue;
      spdlog::warn(
          "outbox table {}.{} already holds {} rows, committed before slot {} existed: they "
          "are not in its stream and will not be published. If they never were (no other "
          "relay or connector delivered them), publish them now: `walrelay republish --all` "
          "(or --since / --since-id for the undelivered ones; consumers dedup on the event "
          "id). Next time create the slot (walrelay setup) before services write events",
          t.schema, t.name, rows > 1000 ? std::string("more than 1000") : std::to_string(rows),
          config_.slot);
    }
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
  // A failover slot's standbys must hold a record before the slot is confirmed up to it
  // (DeliveredRecorder): the standbys PostgreSQL itself waits for, synchronized_standby_slots.
  std::vector<std::string> standby_slots;
  if (slot::SupportsFailoverSlots(settings.server_version_num)) {
    WALRELAY_ASSIGN_OR_RETURN(const slot::SlotInfo streamed, admin_->GetSlot(config_.slot));
    if (streamed.failover) standby_slots = settings.StandbySlots();
  }
  recorder_ = std::make_unique<DeliveredRecorder>(*progress_, config_.slot,
                                                  std::move(standby_slots), delivered);
  pipeline_options.record_confirmable = [this](Lsn lsn) { return recorder_->Record(lsn); };
  if (config_.exactly_once) {
    WALRELAY_RETURN_IF_ERROR(StartExactlyOnce());
    pipeline_options.exactly_once = exactly_once_.get();
  }
  pipeline_ = std::make_unique<Pipeline>(config_, stats_, *conn_, *sink_, *dead_letters_,
                                         std::move(pipeline_options));

  const PluginOptions options =
      StartReplicationOptions(config_.plugin, config_.publication, config_.tables);
  if (Status started = conn_->StartLogical(config_.slot, Lsn(0), options); !started.ok()) {
    // Another relay may have taken the slot since it was read above.
    auto now = admin_->GetSlot(config_.slot);
    if (now.ok() && now->active) StandBy(now->active_pid.value_or(0));
    return started;
  }
  // Streaming: the slot is active, which keeps every other relay standing by.
  WALRELAY_RETURN_IF_ERROR(admin_->UnlockSlot(config_.slot));
  stats_.streaming.store(1);
  stats_.fenced.store(0);
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

// Runs about every 100 ms on the pipeline's thread: heartbeats, progress saving and the
// log's progress line.
Status Relay::Session::Tick() {
  stats_.loop_ticks.fetch_add(1, std::memory_order_relaxed);
  if (config_.heartbeat_interval.count() > 0) WALRELAY_RETURN_IF_ERROR(Heartbeat());
  if (Clock::now() >= next_candidate_) WALRELAY_RETURN_IF_ERROR(TakeCandidate());
  if (Clock::now() >= next_progress_save_) WALRELAY_RETURN_IF_ERROR(SaveProgress());
  relay_.LogProgress();
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

}  // namespace walrelay::relay
