#include "src/relay/core/pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "slot/wire.h"
#include "base/position.h"
#include "src/relay/core/record_builder.h"

namespace walrelay::relay {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

Result<std::unique_ptr<KafkaSink>> KafkaSink::Create(kafka::ProducerOptions options) {
  std::unique_ptr<KafkaSink> sink(new KafkaSink());
  KafkaSink* raw = sink.get();
  WALRELAY_ASSIGN_OR_RETURN(
      sink->producer_,
      kafka::Producer::Create(std::move(options), [raw](uint64_t cookie, const Status& st,
                                                        const kafka::DeliveredRecord& rec) {
        if (raw->handler_) raw->handler_(cookie, st, rec.key().size() + rec.value().size(), &rec);
      }));
  return sink;
}

Status NullSink::Produce(std::string_view, std::string_view key, std::string_view value,
                         std::span<const kafka::Header>, uint64_t cookie, int64_t) {
  pending_.emplace_back(cookie, key.size() + value.size());
  ++records_;
  bytes_ += key.size() + value.size();
  return Status::Ok();
}

int NullSink::Poll(std::chrono::milliseconds) {
  const int n = static_cast<int>(pending_.size());
  for (const auto& [cookie, bytes] : pending_) {
    if (handler_) handler_(cookie, Status::Ok(), bytes, nullptr);
  }
  pending_.clear();
  return n;
}

Status NullSink::Flush(std::chrono::milliseconds timeout) {
  Poll(timeout);
  return Status::Ok();
}

RelayFailpoint ArmedRelayFailpoint() {
  const char* fp = std::getenv("WALRELAY_RELAY_FAILPOINT");
  static std::atomic<bool> said{false};
  if (fp == nullptr || *fp == '\0') return RelayFailpoint::kNone;
#ifndef WALRELAY_FAILPOINTS
  if (!said.exchange(true)) {
    spdlog::warn("WALRELAY_RELAY_FAILPOINT is set but ignored: failpoints are compiled only "
                 "into test builds");
  }
  return RelayFailpoint::kNone;
#else
  const std::string_view name(fp);
  if (name == "confirm_before_ack") {
    if (!said.exchange(true)) {
      spdlog::critical(
          "TEST FAILPOINT confirm_before_ack armed: the relay confirms positions before Kafka "
          "acknowledged their events, which LOSES events on a crash (a test of the tests; "
          "never in production)");
    }
    return RelayFailpoint::kConfirmBeforeAck;
  }
  if (name == "ignore_checkpoint") {
    if (!said.exchange(true)) {
      spdlog::critical(
          "TEST FAILPOINT ignore_checkpoint armed: exactly-once sessions publish again what "
          "the checkpoint says Kafka has, which DUPLICATES events after a restart (a test of "
          "the tests; never in production)");
    }
    return RelayFailpoint::kIgnoreCheckpoint;
  }
  if (!said.exchange(true)) {
    spdlog::warn("WALRELAY_RELAY_FAILPOINT={} is not a failpoint (confirm_before_ack, "
                 "ignore_checkpoint): ignored",
                 fp);
  }
  return RelayFailpoint::kNone;
#endif
}

BrokerReachWatch::BrokerReachWatch(RecordSink& sink, RelayStats& stats,
                                   std::string bootstrap_servers)
    : sink_(sink),
      stats_(stats),
      bootstrap_servers_(bootstrap_servers.empty() ? "the embedded dev broker"
                                                   : std::move(bootstrap_servers)),
      started_(std::chrono::steady_clock::now()) {
  Check();
}

BrokerReachWatch::~BrokerReachWatch() {
  stats_.kafka_unreached_since_us.store(0, std::memory_order_relaxed);
}

void BrokerReachWatch::Check() {
  if (reached_) return;
  reached_ = sink_.BrokerReached();
  if (reached_) {
    stats_.kafka_unreached_since_us.store(0, std::memory_order_relaxed);
    if (warned_) {
      spdlog::info("Kafka: a broker at {} answers now; events are delivered as usual",
                   bootstrap_servers_);
    }
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (stats_.kafka_unreached_since_us.load(std::memory_order_relaxed) == 0) {
    const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    stats_.kafka_unreached_since_us.store(
        now_us - std::chrono::duration_cast<std::chrono::microseconds>(now - started_).count(),
        std::memory_order_relaxed);
  }
  if (!warned_ && now - started_ >= kKafkaUnreachedIsNews) {
    warned_ = true;
    spdlog::warn(
        "Kafka: no broker at {} has answered for {} s (connection refused, unknown host, a "
        "firewall, or a TLS/SASL mismatch: librdkafka's lines above say which). Events "
        "wait in the slot: nothing is lost, nothing is confirmed past them, /readyz is not "
        "ready. Fix: check kafka.bootstrap_servers and that a broker listens there",
        bootstrap_servers_,
        std::chrono::duration_cast<std::chrono::seconds>(now - started_).count());
  }
}

Pipeline::Pipeline(const RelayConfig& config, RelayStats& stats, slot::FrameSource& source,
                   RecordSink& sink, DeadLetterSink& dead_letters, Options options)
    : config_(config),
      stats_(stats),
      source_(source),
      sink_(sink),
      dead_letters_(dead_letters),
      options_(std::move(options)),
      mapper_(config,
              options_.outbox_tables.empty() ? OutboxTablesByName(config.tables)
                                             : options_.outbox_tables,
              /*match_by_oid=*/!options_.outbox_tables.empty() && config.plugin != "wal2json"),
      record_(config),
      reach_(sink, stats, config.bootstrap_servers),
      next_status_(Clock::now()),
      next_tick_(Clock::now()) {
  if (config_.plugin == "wal2json") wal2json_ = std::make_unique<wal2json::Wal2JsonDecoder>();
  confirm_before_ack_ = ArmedRelayFailpoint() == RelayFailpoint::kConfirmBeforeAck;
  confirm_limit_ = options_.confirm_limit;
  sink_.SetDeliveryHandler(
      [this](uint64_t cookie, const Status& st, size_t bytes,
             const kafka::DeliveredRecord* record) { OnDelivery(cookie, st, bytes, record); });
}

Pipeline::~Pipeline() {
  sink_.SetDeliveryHandler(nullptr);
  if (kafka_tx_open_) {
    // Left open: the next session's producer init (the same transactional.id) aborts it.
    stats_.kafka_transactions_aborted.fetch_add(1, std::memory_order_relaxed);
  }
  // What this session read and did not confirm is read again by the next one: no age now.
  stats_.oldest_unconfirmed_commit_us.store(0, std::memory_order_relaxed);
  stats_.kafka_waiting_since_us.store(0, std::memory_order_relaxed);
}

void Pipeline::OnHeartbeat(std::string_view content) {
  int64_t sent_us = 0;
  auto [p, ec] = std::from_chars(content.data(), content.data() + content.size(), sent_us);
  stats_.heartbeats.fetch_add(1, std::memory_order_relaxed);
  if (ec != std::errc() || p != content.data() + content.size()) {
    spdlog::warn("heartbeat message with unexpected content '{}'", content);
    return;
  }
  const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  stats_.heartbeat_lag_us.store(std::max<int64_t>(0, now_us - sent_us), std::memory_order_relaxed);
}

void Pipeline::OnDelivery(uint64_t cookie, const Status& status, size_t bytes,
                          const kafka::DeliveredRecord* delivered) {
  if (cookie == kCheckpointCookie) {
    // Exactly-once mode's checkpoint record: no event; a failure fails the transaction.
    if (!status.ok() && delivery_failure_.ok()) {
      delivery_failure_ = status.WithContext("exactly-once checkpoint record");
    }
    return;
  }
  in_flight_bytes_ -= std::min<uint64_t>(in_flight_bytes_, bytes);
  if (status.ok()) {
    tracker_.Ack(cookie);
    stats_.events_acked.fetch_add(1, std::memory_order_relaxed);
    if (options_.topic_errors != nullptr && options_.topic_errors->any() && delivered != nullptr) {
      options_.topic_errors->Clear(delivered->topic());  // acknowledged: the topic works
    }
    if (options_.produce_latency != nullptr && delivered != nullptr) {
      const int64_t us = delivered->latency_us();
      if (us >= 0) options_.produce_latency->Observe(us / 1e6);
    }
    return;
  }
  if (status.code() == StatusCode::kInvalidArgument && delivery_failure_.ok() &&
      delivered != nullptr) {
    // The broker refused the record for good (e.g. larger than its limit).
    DeadLetterRecord(cookie, *delivered, "Kafka refused the record: " + status.message());
    return;
  }
  if (delivered != nullptr && delivered->topic_error() && options_.topic_errors != nullptr) {
    // The topic's own fault (deleted, or Write refused by an ACL, which metadata does not
    // show): starts its clock and restarts (never a final error); once the bound has
    // passed, the record is dead-lettered like the topic's other events.
    if (options_.topic_errors->Fail(delivered->topic(), status.message()) &&
        delivery_failure_.ok()) {
      DeadLetterRecord(cookie, *delivered,
                       "Kafka refused the record's topic: " + status.message() +
                           " (failing for longer than --kafka-topic-error-timeout-ms=" +
                           std::to_string(options_.topic_errors->timeout().count()) + ")");
      return;
    }
    // Retried: nothing queued behind it may land first (the producer did not stop on a
    // topic's refusal by itself).
    sink_.StopProducing(status);
    if (delivery_failure_.ok()) {
      delivery_failure_ = UnavailableError("delivery failed: " + status.message() +
                                           " (the topic is retried, then its events are "
                                           "dead-lettered)");
    }
    return;
  }
  if (delivery_failure_.ok()) {
    delivery_failure_ = status.WithContext("delivery failed");
  }
}

void Pipeline::DeadLetterRecord(uint64_t cookie, const kafka::DeliveredRecord& record,
                                const std::string& reason) {
  DeadLetter l;
  const auto position = ParsePosition(record.Header(config_.header_names.position));
  if (position) {
    l.source = position->source;
    l.commit_lsn = position->lsn;
    l.ordinal = position->ordinal;
    l.xid = position->xid;
  }
  SetRecordFields(record, config_.header_names, &l);
  l.reason = reason;
  Status st = WriteDeadLetter(l);
  if (st.ok()) {
    tracker_.Ack(cookie);  // handled
    return;
  }
  delivery_failure_ = st;
}

Status Pipeline::CheckTopic(std::string_view topic, std::string* dead_letter_reason) {
  if (options_.topic_errors == nullptr) return Status::Ok();
  // Per event: a usable topic (recheck = max) costs one lookup, no clock read.
  auto it = topic_checks_.find(topic);
  const bool due = it == topic_checks_.end() || (it->second.recheck != Clock::time_point::max() &&
                                                 Clock::now() >= it->second.recheck);
  if (due) {
    const auto now = Clock::now();
    Status st = sink_.CheckTopic(topic, std::chrono::seconds(5));
    TopicCheck check;
    if (st.code() == StatusCode::kNotFound || st.code() == StatusCode::kPermissionDenied) {
      check.status = std::move(st);
      check.recheck = now + std::chrono::seconds(10);
    } else {
      // Usable, or the cluster cannot tell now: produce and let the reports decide (an
      // acknowledged record clears a failure the reports saw; this check cannot).
      check.recheck = Clock::time_point::max();
    }
    it = topic_checks_.insert_or_assign(std::string(topic), std::move(check)).first;
  }
  const Status& st = it->second.status;
  if (st.ok()) return Status::Ok();
  if (options_.topic_errors->Fail(topic, st.message())) {
    *dead_letter_reason = st.message() +
                          " (failing for longer than --kafka-topic-error-timeout-ms=" +
                          std::to_string(options_.topic_errors->timeout().count()) + ")";
    return Status::Ok();
  }
  return UnavailableError(st.message() +
                          ": retried until --kafka-topic-error-timeout-ms has passed, then "
                          "the topic's events are dead-lettered");
}

Status Pipeline::WriteDeadLetter(const DeadLetter& letter) {
  if (Status st = dead_letters_.Write(letter); !st.ok()) {
    stats_.dead_letter_write_failures.fetch_add(1, std::memory_order_relaxed);
    return st.WithContext("dead letter of " + std::string(letter.source) + " at " +
                          letter.commit_lsn.ToString() + " #" + std::to_string(letter.ordinal));
  }
  stats_.events_dead_lettered.fetch_add(1, std::memory_order_relaxed);
  spdlog::warn("dead-lettered event {} of {} (commit {}, #{}): {}", letter.event_id, letter.source,
               letter.commit_lsn.ToString(), letter.ordinal, letter.reason);
  return Status::Ok();
}

DeadLetter Pipeline::LetterForCurrent(std::string_view source, std::string_view reason,
                                      std::string_view payload) const {
  DeadLetter l;
  l.source = source;
  l.commit_lsn = tx_commit_lsn_;
  l.ordinal = tx_ordinal_;
  l.xid = assembler_.xid();
  SetEventFields(event_, &l);
  l.payload = payload;
  l.reason = reason;
  return l;
}

void Pipeline::RetireAcked() {
  const AckTracker::Tx through = tracker_.FlushedThrough();
  if (pending_commits_.empty() || pending_commits_.front().tx > through) {
    PublishOldestPending();
    return;
  }
  const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  while (!pending_commits_.empty() && pending_commits_.front().tx <= through) {
    const PendingCommit& c = pending_commits_.front();
    if (options_.commit_to_ack_latency != nullptr) {
      options_.commit_to_ack_latency->Observe(std::max<int64_t>(0, now_us - c.commit_time_us) /
                                              1e6);
    }
    pending_commits_.pop_front();
  }
  PublishOldestPending();
}

Status Pipeline::NoteKafkaWait() {
  // The wait is measured on the oldest unconfirmed transaction, not on all acks: a broker
  // that only the relay cannot reach holds the confirmed position while the other brokers'
  // partitions are still acknowledged (NetworkFaultTest.OneBrokerBlackHoled...).
  const AckTracker::FrontProgress progress = tracker_.Front();
  const auto now = Clock::now();
  if (!progress.waiting || progress != progress_at_wait_) {
    progress_at_wait_ = progress;
    quiet_since_ = now;
    if (wait_logged_) {
      spdlog::info("Kafka acknowledges again; the events that waited are delivered and "
                   "confirmed as usual");
      wait_logged_ = false;
    }
    if (stats_.kafka_waiting_since_us.load(std::memory_order_relaxed) != 0) {
      stats_.kafka_waiting_since_us.store(0, std::memory_order_relaxed);
    }
    return Status::Ok();
  }
  if (stats_.kafka_waiting_since_us.load(std::memory_order_relaxed) == 0) {
    const auto quiet = std::chrono::duration_cast<std::chrono::microseconds>(now - quiet_since_);
    const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    stats_.kafka_waiting_since_us.store(now_us - quiet.count(), std::memory_order_relaxed);
  }
  if (!wait_logged_ && now - quiet_since_ >= kKafkaWaitIsNews) {
    wait_logged_ = true;
    spdlog::warn(
        "waiting for Kafka: the oldest unconfirmed transaction's events have had no "
        "acknowledgement for {} s ({} events in flight in all; brokers down or unreachable "
        "from here, or fewer in-sync replicas than the topic's min.insync.replicas). Nothing "
        "is lost: nothing past them is confirmed, the slot keeps them, and they are delivered "
        "once Kafka acknowledges",
        kKafkaWaitIsNews.count(), tracker_.InFlightEvents());
  }
  if (config_.kafka_wait_yield.count() > 0 && now - quiet_since_ >= config_.kafka_wait_yield) {
    yielded_ = true;
    return UnavailableError(fmt::format(
        "Kafka unreachable from this relay: the oldest unconfirmed transaction's events had "
        "no acknowledgement for {} s (flow.kafka_wait_yield_ms); letting go of the slot so "
        "that a standby relay that reaches Kafka can take over. Nothing is lost: the {} "
        "events in flight are not confirmed and are published again by whichever relay "
        "streams next",
        std::chrono::duration_cast<std::chrono::seconds>(config_.kafka_wait_yield).count(),
        tracker_.InFlightEvents()));
  }
  return Status::Ok();
}

void Pipeline::PublishOldestPending() {
  stats_.oldest_unconfirmed_commit_us.store(
      pending_commits_.empty() ? 0 : pending_commits_.front().commit_time_us,
      std::memory_order_relaxed);
}

Status Pipeline::PublishOrDeadLetter(const Status& mapped, std::string_view source,
                                     std::string_view raw_payload) {
  if (!mapped.ok()) {
    if (mapped.code() != StatusCode::kInvalidArgument) return mapped;
    WALRELAY_RETURN_IF_ERROR(
        WriteDeadLetter(LetterForCurrent(source, mapped.message(), raw_payload)));
    ++tx_ordinal_;
    return Status::Ok();
  }
  std::string topic_reason;
  WALRELAY_RETURN_IF_ERROR(CheckTopic(event_.topic, &topic_reason));
  if (!topic_reason.empty()) {
    WALRELAY_RETURN_IF_ERROR(WriteDeadLetter(LetterForCurrent(source, topic_reason, event_.value)));
    ++tx_ordinal_;
    return Status::Ok();
  }
  SourcePosition position;
  position.lsn = tx_commit_lsn_;
  position.ordinal = tx_ordinal_;
  position.xid = tx_xid_;
  position.commit_time_us = tx_commit_time_us_;
  position.source = source;
  record_.Build(event_, position);
  if (options_.exactly_once != nullptr && !kafka_tx_open_) {
    WALRELAY_RETURN_IF_ERROR(sink_.BeginTransaction());
    kafka_tx_open_ = true;
    kafka_tx_began_ = Clock::now();
  }
  const uint64_t token = tracker_.AddEvent(tx_);
  const int64_t timestamp_ms =
      config_.record_timestamp == RecordTimestamp::kCommit ? tx_commit_time_us_ / 1000 : 0;
  Status st = sink_.Produce(event_.topic, event_.key, record_.value(), record_.headers(), token,
                            timestamp_ms);
  if (st.code() == StatusCode::kInvalidArgument) {
    // Refused locally (too large): dead-letter; the token is acked right away.
    WALRELAY_RETURN_IF_ERROR(WriteDeadLetter(LetterForCurrent(source, st.message(), event_.value)));
    tracker_.Ack(token);
  } else if (!st.ok()) {
    return st;
  } else {
    in_flight_bytes_ += event_.key.size() + record_.value().size();
    stats_.events_produced.fetch_add(1, std::memory_order_relaxed);
    tx_produced_ = true;
    if (options_.exactly_once != nullptr) options_.exactly_once->batcher.OnRecord(Clock::now());
  }
  ++tx_ordinal_;
  return Status::Ok();
}

Status Pipeline::HandleMessage(const pgoutput::Message& m,
                               const pgoutput::TransactionAssembler::Event& e) {
  using pgoutput::TransactionAssembler;
  switch (e.boundary) {
    case TransactionAssembler::Boundary::kBegin: {
      const auto& begin = std::get<pgoutput::Begin>(m);
      tx_ = tracker_.BeginTransaction();
      tx_commit_lsn_ = begin.final_lsn;
      tx_ordinal_ = 0;
      tx_xid_ = begin.xid;
      tx_commit_time_us_ = slot::PgTimeToUnixMicros(begin.commit_time);
      tx_already_published_ = options_.exactly_once != nullptr &&
                              options_.exactly_once->resume.AlreadyPublished(tx_commit_lsn_);
      source_.SetInTransaction(true);
      return Status::Ok();
    }
    case TransactionAssembler::Boundary::kCommit:
      if (e.end_lsn > frame_end_) {
        return DataLossError("transaction " + std::to_string(tx_xid_) + " (commit " +
                             tx_commit_lsn_.ToString() + ") claims to end at " +
                             e.end_lsn.ToString() + ", past the WAL position " +
                             frame_end_.ToString() +
                             " the server sent it at: the output plugin's bytes are corrupt; "
                             "nothing from this transaction on is confirmed (the next session "
                             "replays it)");
      }
      tracker_.CommitTransaction(tx_, e.end_lsn);
      // A transaction that produced nothing has no ack to wait for: no pending commit, so
      // memory does not grow with transactions of other tables or empty ones (invariant 4).
      if (tx_produced_) pending_commits_.push_back({tx_, tx_commit_time_us_});
      tx_produced_ = false;
      tx_already_published_ = false;
      RetireAcked();  // publishes the oldest pending commit
      tx_ = 0;
      stats_.transactions.fetch_add(1, std::memory_order_relaxed);
      source_.SetInTransaction(false);
      if (options_.exactly_once != nullptr &&
          options_.exactly_once->batcher.OnSourceCommit(
              Checkpoint{tx_commit_lsn_, tx_xid_, tx_commit_time_us_, tx_ordinal_}, e.end_lsn,
              Clock::now())) {
        return CommitKafkaTransaction();
      }
      return Status::Ok();
    case TransactionAssembler::Boundary::kNone:
      break;
    default:
      return DataLossError(
          "unexpected streaming or two-phase message (walrelay starts replication without "
          "streaming and two_phase)");
  }
  if (tx_already_published_ && (std::holds_alternative<pgoutput::Insert>(m) ||
                                std::holds_alternative<pgoutput::LogicalMessage>(m))) {
    // Exactly-once mode: Kafka has this source transaction (the checkpoint says so).
    stats_.skipped_already_published.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }
  if (const auto* rel = std::get_if<pgoutput::Relation>(&m)) {
    mapper_.OnRelation(*rel);
  } else if (const auto* ins = std::get_if<pgoutput::Insert>(&m)) {
    if (!mapper_.IsOutbox(ins->relation_id)) {
      stats_.skipped_other_tables.fetch_add(1, std::memory_order_relaxed);
      if (foreign_relations_.insert(ins->relation_id).second) {
        spdlog::warn(
            "the stream carries INSERTs into {} (relation {}), which is not a configured outbox "
            "table: they are not published (counted in walrelay_events_skipped_total"
            "{{kind=\"other_table\"}}). If it is an outbox table, add it to --source-table "
            "(names follow SQL rules: unquoted folds to lower case); else narrow the publication",
            mapper_.TableName(ins->relation_id), ins->relation_id);
      }
      return Status::Ok();
    }
    Status mapped = mapper_.MapInsert(*ins, &event_);
    if (!mapped.ok()) {
      const std::string row = mapper_.RowAsJson(*ins);
      return PublishOrDeadLetter(mapped, mapper_.TableName(ins->relation_id), row);
    }
    return PublishOrDeadLetter(mapped, mapper_.TableName(ins->relation_id), event_.value);
  } else if (const auto* upd = std::get_if<pgoutput::Update>(&m)) {
    if (mapper_.IsOutbox(upd->relation_id)) {
      stats_.skipped_updates.fetch_add(1, std::memory_order_relaxed);
      spdlog::debug("UPDATE on outbox table {} ignored (only INSERTs publish)",
                    mapper_.TableName(upd->relation_id));
    }
  } else if (const auto* del = std::get_if<pgoutput::Delete>(&m)) {
    if (mapper_.IsOutbox(del->relation_id))
      stats_.skipped_deletes.fetch_add(1, std::memory_order_relaxed);
  } else if (const auto* tr = std::get_if<pgoutput::Truncate>(&m)) {
    for (auto oid : tr->relation_ids) {
      if (mapper_.IsOutbox(oid)) {
        stats_.skipped_truncates.fetch_add(1, std::memory_order_relaxed);
        spdlog::warn("TRUNCATE of outbox table {} seen (nothing to publish)",
                     mapper_.TableName(oid));
      }
    }
  } else if (const auto* msg = std::get_if<pgoutput::LogicalMessage>(&m)) {
    if (msg->prefix == kHeartbeatPrefix && !msg->transactional()) {
      OnHeartbeat(msg->content);
      return Status::Ok();
    }
    const bool off_but_meant = config_.message_prefix.empty() &&
                               msg->prefix == kDefaultMessagePrefix && msg->transactional();
    if (!mapper_.IsOutboxMessage(*msg) && !off_but_meant) {
      stats_.skipped_messages.fetch_add(1, std::memory_order_relaxed);
      return Status::Ok();
    }
    if (off_but_meant) {
      // A writer meant this as an event, but table-less events are off: keep it for the
      // operator instead of publishing it or dropping it.
      event_ = {};
      return PublishOrDeadLetter(
          InvalidArgumentError("table-less events are off (source.message_prefix is not set): "
                               "set --source-message-prefix " +
                               std::string(kDefaultMessagePrefix) +
                               " to publish such events, or stop emitting them"),
          "message:" + std::string(kDefaultMessagePrefix), msg->content);
    }
    if (!msg->transactional()) {
      // Outside any transaction: there is no commit to hold back, and no event to publish
      // atomically. Dead-letter it under its own LSN.
      tx_commit_lsn_ = msg->lsn;
      tx_ordinal_ = 0;
      event_ = {};
    }
    Status mapped = mapper_.MapMessage(*msg, &event_);
    return PublishOrDeadLetter(mapped, "message:" + config_.message_prefix, msg->content);
  }
  return Status::Ok();
}

Status Pipeline::HandleXLogData(const slot::XLogData& x) {
  stats_.bytes_received.fetch_add(x.data.size(), std::memory_order_relaxed);
  frame_end_ = x.wal_end;
  if (wal2json_) return HandleWal2Json(x);
  pgoutput::DecodeOptions opts;
  opts.protocol_version = options_.protocol_version;
  Status st = pgoutput::Decode(x.data, opts, &message_);
  if (!st.ok()) return st.WithContext("at WAL position " + x.wal_start.ToString());
  auto event = assembler_.Feed(message_);
  if (!event.ok()) return event.status().WithContext("at WAL position " + x.wal_start.ToString());
  WALRELAY_RETURN_IF_ERROR(HandleMessage(message_, *event));
  if (x.wal_end > received_) received_ = x.wal_end;
  return Status::Ok();
}

Status Pipeline::HandleWal2Json(const slot::XLogData& x) {
  Status st = wal2json_->Decode(x.data, &wal2json_messages_);
  if (!st.ok()) return st.WithContext("at WAL position " + x.wal_start.ToString());
  for (const pgoutput::Message& m : wal2json_messages_) {
    auto event = assembler_.Feed(m);
    if (!event.ok()) return event.status().WithContext("at WAL position " + x.wal_start.ToString());
    WALRELAY_RETURN_IF_ERROR(HandleMessage(m, *event));
  }
  if (x.wal_end > received_) received_ = x.wal_end;
  return Status::Ok();
}

Lsn Pipeline::Acked() const {
  Lsn flush = tracker_.FlushLsn();
  if (confirm_before_ack_) flush = std::max(flush, received_);  // the test failpoint
  // Exactly-once mode: acknowledged is not enough while the Kafka transaction holding the
  // records is open; nothing past what committed (nothing waits in Kafka otherwise).
  if (options_.exactly_once != nullptr && kafka_tx_open_) {
    flush = std::min(flush, options_.exactly_once->batcher.ConfirmLimit());
  }
  return flush;
}

Status Pipeline::CommitKafkaTransaction() {
  Options::ExactlyOnce& eo = *options_.exactly_once;
  const std::optional<Checkpoint>& checkpoint = eo.batcher.pending_checkpoint();
  if (!kafka_tx_open_ || !checkpoint) return Status::Ok();
  // The checkpoint record, in the same transaction: read back at the next start to skip
  // what this transaction holds. Its report is not an event's (cookie 0 is no token).
  const std::string value = FormatCheckpoint(*checkpoint);
  WALRELAY_RETURN_IF_ERROR(
      sink_.Produce(eo.checkpoint_topic, eo.checkpoint_key, value, {}, kCheckpointCookie, 0)
          .WithContext("exactly-once checkpoint record"));
  const uint64_t records = eo.batcher.records();
  const auto started = Clock::now();
  Status committed = sink_.CommitTransaction(eo.commit_timeout);
  if (!committed.ok()) {
    // Nothing of this Kafka transaction becomes visible (aborted by the broker, or by the
    // next producer of the transactional.id); the next session reads it again.
    eo.batcher.OnKafkaAborted();
    kafka_tx_open_ = false;
    stats_.kafka_transactions_aborted.fetch_add(1, std::memory_order_relaxed);
    const auto open_for =
        std::chrono::duration_cast<milliseconds>(Clock::now() - kafka_tx_began_);
    if (open_for >= eo.transaction_timeout * 9 / 10) {
      // The coordinator aborts a transaction open past transaction.timeout.ms: the same
      // source transactions would fail the same way at every restart.
      return FailedPreconditionError(fmt::format(
          "exactly-once: the Kafka transaction through {} ({} records) was open for {} ms, "
          "longer than transaction.timeout.ms ({} ms), and was aborted; nothing of it is "
          "visible and nothing past the last commit is confirmed, so the next session sends "
          "it again and fails the same way until the timeout is raised. Fix: --kafka-property "
          "transaction.timeout.ms=<more than the time a transaction this size takes> (at most "
          "the brokers' transaction.max.timeout.ms, 900000 by default), or a smaller "
          "--kafka-transaction-interval-ms if the interval is what made it long ({})",
          checkpoint->commit_lsn.ToString(), records, open_for.count(),
          eo.transaction_timeout.count(), committed.message()));
    }
    return committed.WithContext("exactly-once: commit of the Kafka transaction through " +
                                 checkpoint->commit_lsn.ToString());
  }
  if (!delivery_failure_.ok()) return delivery_failure_;
  eo.batcher.OnKafkaCommitted();
  kafka_tx_open_ = false;
  stats_.kafka_transactions_committed.fetch_add(1, std::memory_order_relaxed);
  if (eo.commit_latency != nullptr) {
    eo.commit_latency->Observe(std::chrono::duration<double>(Clock::now() - started).count());
  }
  if (eo.transaction_records != nullptr) eo.transaction_records->Observe(static_cast<double>(records));
  return Status::Ok();
}

Lsn Pipeline::confirmable_lsn() const {
  return options_.record_confirmable ? std::min(Acked(), confirm_limit_) : Acked();
}

Status Pipeline::RaiseConfirmLimit(milliseconds min_gap) {
  if (!options_.record_confirmable) return Status::Ok();
  const Lsn acked = Acked();
  if (acked <= confirm_limit_) return Status::Ok();
  const auto clock = Clock::now();
  if (clock - last_record_ < min_gap) return Status::Ok();
  WALRELAY_ASSIGN_OR_RETURN(const Lsn released, options_.record_confirmable(acked));
  // All flushed events are at or before `acked`. While a record is held back, the events
  // it covers stay counted as unconfirmed until a released position covers them.
  if (records_held_.empty() || records_held_.back().first < acked) {
    if (records_held_.size() == 64) records_held_.pop_back();  // the newest stands for both
    records_held_.emplace_back(acked, tracker_.FlushedEventsTotal());
  }
  confirm_limit_ = std::max(confirm_limit_, std::min(released, acked));
  while (!records_held_.empty() && records_held_.front().first <= confirm_limit_) {
    events_at_record_ = records_held_.front().second;
    records_held_.pop_front();
  }
  last_record_ = clock;
  return Status::Ok();
}

Status Pipeline::SendStatus(bool reply_requested, bool final) {
  // While events flow, a record every 100 ms; idle, at most every second: the record
  // itself writes WAL, which the next keepalive offers to confirm, and so on.
  const bool events = tracker_.FlushedEventsTotal() != events_at_record_;
  WALRELAY_RETURN_IF_ERROR(RaiseConfirmLimit(final    ? milliseconds(0)
                                             : events ? milliseconds(100)
                                                      : milliseconds(1000)));
  const Lsn flush = confirmable_lsn();
  WALRELAY_RETURN_IF_ERROR(
      source_.SendStatus(std::max(received_, flush), flush, flush, reply_requested));
  // The events this status confirms: all flushed ones, or, when the gate holds the
  // position back, those the last record covered (the backpressure cap counts the rest
  // as unconfirmed, so a crash repeats no more than the cap allows).
  reported_events_total_ = flush == Acked() ? tracker_.FlushedEventsTotal() : events_at_record_;
  RetireAcked();
  stats_.flush_lsn.store(flush.value, std::memory_order_relaxed);
  stats_.received_lsn.store(received_.value, std::memory_order_relaxed);
  if (flush != last_sent_flush_) {
    spdlog::debug("confirmed flush position {}", flush.ToString());
    last_sent_flush_ = flush;
  }
  next_status_ = Clock::now() + options_.status_interval;
  return Status::Ok();
}

Status Pipeline::HandleFrame(const slot::Frame& frame, bool* ended) {
  switch (frame.kind) {
    case slot::Frame::Kind::kXLogData:
      return HandleXLogData(frame.xlog);
    case slot::Frame::Kind::kKeepalive: {
      const slot::PrimaryKeepalive& k = frame.keepalive;
      stats_.server_wal_end.store(k.wal_end.value, std::memory_order_relaxed);
      if (k.wal_end > received_) received_ = k.wal_end;
      // Everything before this keepalive has been read; with nothing open or in flight
      // its position can be confirmed (an idle outbox must not pin WAL).
      if (!assembler_.in_transaction()) tracker_.ObserveIdlePosition(k.wal_end);
      if (k.reply_requested) return SendStatus(false);
      return Status::Ok();
    }
    case slot::Frame::Kind::kEndOfStream:
      if (options_.end_of_stream_is_error) {
        return UnavailableError("the server ended the replication stream");
      }
      *ended = true;
      return Status::Ok();
    case slot::Frame::Kind::kTimeout:
      return Status::Ok();
  }
  return Status::Ok();
}

Status Pipeline::Run(const std::atomic<bool>& stop) {
  // Waits for the database also end when the sink has acks to serve (its wake fd); without
  // one, a wait with events in flight lasts at most 1 ms so that acks are not held up.
  const int wake_fd = sink_.WakeFd();
  source_.SetWakeFd(wake_fd);
  struct ClearWake {
    slot::FrameSource& source;
    ~ClearWake() { source.SetWakeFd(-1); }
  } clear_wake{source_};
  const milliseconds in_flight_wait(wake_fd >= 0 ? 100 : 1);
  while (!stop.load(std::memory_order_relaxed)) {
    if (options_.tick && Clock::now() >= next_tick_) {
      WALRELAY_RETURN_IF_ERROR(options_.tick());
      next_tick_ = Clock::now() + milliseconds(100);
    }
    // Exactly-once mode, between source transactions: an open Kafka transaction whose
    // interval is over is committed, so a quiet stream's last events become visible.
    if (options_.exactly_once != nullptr && kafka_tx_open_ && !assembler_.in_transaction() &&
        options_.exactly_once->batcher.Due(Clock::now())) {
      WALRELAY_RETURN_IF_ERROR(CommitKafkaTransaction());
    }
    sink_.Poll(milliseconds(0));
    if (!delivery_failure_.ok()) return delivery_failure_;
    RetireAcked();
    WALRELAY_RETURN_IF_ERROR(NoteKafkaWait());
    reach_.Check();
    WALRELAY_RETURN_IF_ERROR(sink_.Fatal());
    stats_.in_flight_events.store(tracker_.InFlightEvents(), std::memory_order_relaxed);
    stats_.in_flight_bytes.store(in_flight_bytes_, std::memory_order_relaxed);

    if (Clock::now() >= next_status_) WALRELAY_RETURN_IF_ERROR(SendStatus(false));

    if (AtCapacity()) {
      // Backpressure: read nothing; serve acks, and confirm at once what became
      // confirmable so the window reopens without waiting for the status period.
      if (Acked() != last_sent_flush_) {
        // Held back by the gate, the window reopens only with a record: soon.
        WALRELAY_RETURN_IF_ERROR(RaiseConfirmLimit(milliseconds(10)));
        if (confirmable_lsn() != last_sent_flush_) WALRELAY_RETURN_IF_ERROR(SendStatus(false));
      }
      sink_.Poll(milliseconds(5));
      continue;
    }
    // Rounded up: truncated, the last fraction of a millisecond before a status update
    // became Read(0) calls in a busy loop.
    auto wait = std::chrono::ceil<milliseconds>(next_status_ - Clock::now());
    wait = std::clamp(wait, milliseconds(0),
                      tracker_.InFlightEvents() ? in_flight_wait : milliseconds(100));
    WALRELAY_ASSIGN_OR_RETURN(slot::Frame frame, source_.Read(wait));
    // Then what the source already holds, up to kBurst frames, without the per-iteration
    // work above (delivery reports, clock reads, status checks): it is amortised over the
    // burst. The burst ends at the first frame that is not XLogData (a keepalive, a
    // timeout: nothing buffered) or when the in-flight caps are reached.
    constexpr int kBurst = 64;
    for (int i = 0;; ++i) {
      bool ended = false;
      WALRELAY_RETURN_IF_ERROR(HandleFrame(frame, &ended));
      if (ended) return Drain();
      if (frame.kind != slot::Frame::Kind::kXLogData || i + 1 == kBurst || AtCapacity() ||
          stop.load(std::memory_order_relaxed)) {
        break;
      }
      WALRELAY_ASSIGN_OR_RETURN(frame, source_.Read(milliseconds(0)));
    }
  }
  // Stopped inside a source transaction: its events may be in Kafka already, but it is
  // confirmable only once its Commit is read. pgoutput sends a transaction's messages
  // together once it committed (walrelay never asks for in-progress streaming), so the
  // rest is on its way:
  // read on to the Commit, within the shutdown timeout, so that a clean stop repeats
  // nothing (PipelineTest.StopInsideATransactionReadsOnToItsCommitAndConfirmsIt).
  const auto read_until = Clock::now() + config_.shutdown_timeout;
  while (assembler_.in_transaction() && Clock::now() < read_until) {
    sink_.Poll(milliseconds(0));
    RetireAcked();
    WALRELAY_ASSIGN_OR_RETURN(slot::Frame frame, source_.Read(milliseconds(10)));
    bool ended = false;
    WALRELAY_RETURN_IF_ERROR(HandleFrame(frame, &ended));
    if (ended) break;
  }
  return Drain();
}

Status Pipeline::Drain() {
  spdlog::info("stopping: waiting up to {} ms for {} in-flight events",
               config_.shutdown_timeout.count(), tracker_.InFlightEvents());
  if (options_.exactly_once != nullptr && kafka_tx_open_ && !assembler_.in_transaction() &&
      options_.exactly_once->batcher.records() != 0) {
    // Exactly-once mode: what is whole is committed; a source transaction read in part
    // stays out (its Kafka transaction is aborted with the producer) and is read again.
    options_.exactly_once->batcher.Due(Clock::now() + std::chrono::hours(24 * 365));
    if (Status st = CommitKafkaTransaction(); !st.ok()) spdlog::warn("{}", st.ToString());
  }
  Status flushed = sink_.Flush(config_.shutdown_timeout);
  if (!delivery_failure_.ok()) spdlog::warn("{}", delivery_failure_.ToString());
  Status st = SendStatus(false, /*final=*/true);
  spdlog::info("stopped at flush position {} ({} events still unacked will be replayed{})",
               confirmable_lsn().ToString(), tracker_.InFlightEvents(),
               assembler_.in_transaction()
                   ? "; the source transaction read in part, whose Commit did not arrive within "
                     "the shutdown timeout, is read again whole"
                   : "");
  (void)flushed;
  return st;
}

}  // namespace walrelay::relay
