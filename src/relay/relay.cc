#include "src/relay/relay.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <random>
#include <thread>

#include "decoder/pgoutput.h"
#include "decoder/transaction_assembler.h"
#include "slot/replication_connection.h"
#include "slot/slot_admin.h"
#include "slot/wire.h"
#include "src/kafka/mock_cluster.h"
#include "src/kafka/producer.h"
#include "src/relay/ack_tracker.h"
#include "src/relay/dead_letter.h"
#include "src/relay/outbox_mapper.h"

namespace walrelay::relay {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Relay::Embedded {
  std::unique_ptr<kafka::MockCluster> cluster;
};

namespace {

// Errors a new session cannot fix: Run() returns them instead of retrying.
bool Retryable(const Status& st) {
  switch (st.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kResourceExhausted:
    case StatusCode::kInternal:      // fatal producer error: a new producer fixes it
    case StatusCode::kNotFound:      // e.g. a topic not created yet: loud, retried
    case StatusCode::kFailedPrecondition:  // e.g. the slot is active for another reader
      return true;
    default:
      return false;
  }
}

}  // namespace

// One streaming session: connections, producer and tracker live and die together.
class Relay::Session {
 public:
  Session(Relay& relay) : relay_(relay), config_(relay.config_), stats_(relay.stats_),
        mapper_(config_) {}

  ~Session() {
    if (producer_) producer_->Purge();  // stale reports must not reach a dead tracker
    stats_.streaming.store(0);
    stats_.in_flight_events.store(0);
    stats_.in_flight_bytes.store(0);
  }

  Status Start();
  // Streams until stop is requested (returns OK after draining) or a failure.
  Status Stream();

 private:
  Status HandleXLogData(const slot::XLogData& x);
  Status HandleMessage(const pgoutput::Message& m, const pgoutput::TransactionAssembler::Event& e);
  Status PublishOrDeadLetter(const Status& mapped, std::string_view source,
                             std::string_view payload_for_dead_letter);
  Status DeadLetter(const relay::DeadLetter& letter);
  relay::DeadLetter LetterForCurrent(std::string_view source, std::string_view reason,
                                     std::string_view payload) const;
  Status SendStatus(bool reply_requested);
  Status Drain();
  void OnDelivery(uint64_t cookie, const Status& status, const kafka::DeliveredRecord& record);
  // Events PostgreSQL would resend if the relay died now: produced in transactions not
  // yet confirmed by a status update. The in-flight cap applies to these, so it bounds
  // both memory and the duplicates a crash can cause.
  uint64_t UnconfirmedEvents() const {
    return tracker_.UnflushedEvents() + (tracker_.FlushedEventsTotal() - reported_events_total_);
  }
  bool AtCapacity() const {
    return UnconfirmedEvents() >= static_cast<uint64_t>(config_.max_in_flight_events) ||
           in_flight_bytes_ >= static_cast<uint64_t>(config_.max_in_flight_bytes);
  }

  Relay& relay_;
  const RelayConfig& config_;
  RelayStats& stats_;
  OutboxMapper mapper_;
  AckTracker tracker_;
  pgoutput::TransactionAssembler assembler_;
  pgoutput::Message message_;
  std::unique_ptr<slot::ReplicationConnection> conn_;
  std::unique_ptr<kafka::Producer> producer_;
  std::unique_ptr<DeadLetterWriter> dead_letters_;
  OutboxEvent event_;
  std::vector<kafka::Header> headers_;
  std::string lsn_text_, xid_text_, time_text_, ordinal_text_;

  AckTracker::Tx tx_ = 0;
  Lsn tx_commit_lsn_;
  uint32_t tx_ordinal_ = 0;
  uint64_t in_flight_bytes_ = 0;
  Status delivery_failure_;  // first failed delivery report: ends the session
  Lsn received_;
  Lsn last_sent_flush_;
  uint64_t reported_events_total_ = 0;  // FlushedEventsTotal() at the last status update
  milliseconds status_interval_{1000};
  Clock::time_point next_status_ = Clock::now();
};

Status Relay::Session::Start() {
  std::string conninfo = config_.source_dsn;
  if (!config_.source_password.empty()) {
    conninfo += " password='";
    for (char ch : config_.source_password) {
      if (ch == '\'' || ch == '\\') conninfo += '\\';
      conninfo += ch;
    }
    conninfo += "'";
  }

  // Server checks and objects, over a normal connection.
  WALRELAY_ASSIGN_OR_RETURN(auto admin, slot::SlotAdmin::Connect(conninfo));
  WALRELAY_ASSIGN_OR_RETURN(slot::ServerSettings settings, admin->GetServerSettings());
  if (settings.wal_level != "logical") {
    return FailedPreconditionError("wal_level is '" + settings.wal_level +
                                   "': set wal_level = logical in postgresql.conf and restart "
                                   "PostgreSQL");
  }
  status_interval_ = std::min(config_.status_interval, slot::StatusInterval(settings.wal_sender_timeout));
  if (config_.create_slot && !config_.tables.empty()) {
    WALRELAY_RETURN_IF_ERROR(admin->EnsurePublication(config_.publication, config_.tables));
  }
  WALRELAY_ASSIGN_OR_RETURN(dead_letters_, DeadLetterWriter::Open(conninfo, config_.dead_letter_table,
                                                                   config_.slot));

  // The replication connection.
  std::string repl = conninfo + " replication=database";
  WALRELAY_ASSIGN_OR_RETURN(conn_, slot::ReplicationConnection::Connect(repl));
  auto existing = admin->GetSlot(config_.slot);
  if (!existing.ok()) {
    if (existing.status().code() != StatusCode::kNotFound || !config_.create_slot) {
      return existing.status();
    }
    WALRELAY_ASSIGN_OR_RETURN(auto created,
                              conn_->CreateLogicalSlot(config_.slot, "pgoutput", false, false));
    spdlog::info("created logical slot {} at {}", config_.slot,
                 created.consistent_point.ToString());
  }

  // The producer.
  kafka::ProducerOptions popts;
  popts.properties.emplace_back("bootstrap.servers", relay_.bootstrap_servers());
  for (const auto& [k, v] : config_.kafka_properties) popts.properties.emplace_back(k, v);
  WALRELAY_ASSIGN_OR_RETURN(
      producer_, kafka::Producer::Create(std::move(popts),
                                         [this](uint64_t cookie, const Status& st,
                                                const kafka::DeliveredRecord& rec) {
                                           OnDelivery(cookie, st, rec);
                                         }));

  std::vector<std::pair<std::string, std::string>> options = {
      {"proto_version", "1"},
      {"publication_names", config_.publication},
      {"messages", "true"},
  };
  WALRELAY_RETURN_IF_ERROR(conn_->StartLogical(config_.slot, Lsn(0), options));
  stats_.streaming.store(1);
  spdlog::info("streaming slot {} (publication {}), status every {} ms", config_.slot,
               config_.publication, status_interval_.count());
  return Status::Ok();
}

void Relay::Session::OnDelivery(uint64_t cookie, const Status& status,
                                const kafka::DeliveredRecord& record) {
  const uint64_t bytes = record.key().size() + record.value().size();
  in_flight_bytes_ -= std::min(in_flight_bytes_, bytes);
  if (status.ok()) {
    tracker_.Ack(cookie);
    stats_.events_acked.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (status.code() == StatusCode::kInvalidArgument && delivery_failure_.ok()) {
    // The broker refused the record for good (e.g. larger than its limit): dead-letter it
    // from the record's own headers, then it counts as handled.
    const std::string reason = "Kafka refused the record: " + status.message();
    relay::DeadLetter l;
    l.source = record.Header("walrelay.source");
    l.commit_lsn = Lsn::Parse(record.Header("walrelay.lsn")).value_or(Lsn());
    l.ordinal = static_cast<uint32_t>(std::strtoul(std::string(record.Header("walrelay.ordinal")).c_str(), nullptr, 10));
    l.xid = static_cast<uint32_t>(std::strtoul(std::string(record.Header("walrelay.xid")).c_str(), nullptr, 10));
    l.event_id = record.Header("event_id");
    l.aggregate_id = record.key();
    l.event_type = record.Header("event_type");
    l.topic = record.topic();
    l.payload = record.value();
    l.reason = reason;
    Status st = DeadLetter(l);
    if (st.ok()) {
      tracker_.Ack(cookie);
      return;
    }
    delivery_failure_ = st;
    return;
  }
  if (delivery_failure_.ok()) {
    delivery_failure_ = status.WithContext("delivery failed");
  }
}

Status Relay::Session::DeadLetter(const relay::DeadLetter& letter) {
  WALRELAY_RETURN_IF_ERROR(dead_letters_->Write(letter));
  stats_.events_dead_lettered.fetch_add(1, std::memory_order_relaxed);
  spdlog::warn("dead-lettered event {} of {} (commit {}, #{}): {}", letter.event_id,
               letter.source, letter.commit_lsn.ToString(), letter.ordinal, letter.reason);
  return Status::Ok();
}

relay::DeadLetter Relay::Session::LetterForCurrent(std::string_view source,
                                                   std::string_view reason,
                                                   std::string_view payload) const {
  relay::DeadLetter l;
  l.source = source;
  l.commit_lsn = tx_commit_lsn_;
  l.ordinal = tx_ordinal_;
  l.xid = assembler_.xid();
  l.event_id = event_.event_id;
  l.aggregate_id = event_.key;
  l.event_type = event_.event_type;
  l.topic = event_.topic;
  l.payload = payload;
  l.reason = reason;
  return l;
}

Status Relay::Session::PublishOrDeadLetter(const Status& mapped, std::string_view source,
                                           std::string_view raw_payload) {
  if (!mapped.ok()) {
    if (mapped.code() != StatusCode::kInvalidArgument) return mapped;
    WALRELAY_RETURN_IF_ERROR(DeadLetter(LetterForCurrent(source, mapped.message(), raw_payload)));
    ++tx_ordinal_;
    return Status::Ok();
  }
  headers_.clear();
  headers_.push_back({"event_id", event_.event_id});
  headers_.push_back({"event_type", event_.event_type});
  if (!event_.aggregate_type.empty()) headers_.push_back({"aggregate_type", event_.aggregate_type});
  for (const auto& [name, value] : event_.extra_headers) headers_.push_back({name, value});
  headers_.push_back({"walrelay.source", source});
  headers_.push_back({"walrelay.lsn", lsn_text_});
  headers_.push_back({"walrelay.xid", xid_text_});
  headers_.push_back({"walrelay.commit_time", time_text_});
  ordinal_text_ = std::to_string(tx_ordinal_);
  headers_.push_back({"walrelay.ordinal", ordinal_text_});
  const uint64_t token = tracker_.AddEvent(tx_);
  Status st = producer_->Produce(event_.topic, event_.key, event_.value, headers_, token);
  if (st.code() == StatusCode::kInvalidArgument) {
    // Refused locally (too large): dead-letter; the token is acked right away.
    WALRELAY_RETURN_IF_ERROR(DeadLetter(LetterForCurrent(source, st.message(), event_.value)));
    tracker_.Ack(token);
  } else if (!st.ok()) {
    return st;
  } else {
    in_flight_bytes_ += event_.key.size() + event_.value.size();
    stats_.events_produced.fetch_add(1, std::memory_order_relaxed);
  }
  ++tx_ordinal_;
  return Status::Ok();
}

Status Relay::Session::HandleMessage(const pgoutput::Message& m,
                                     const pgoutput::TransactionAssembler::Event& e) {
  using pgoutput::TransactionAssembler;
  switch (e.boundary) {
    case TransactionAssembler::Boundary::kBegin: {
      const auto& begin = std::get<pgoutput::Begin>(m);
      tx_ = tracker_.BeginTransaction();
      tx_commit_lsn_ = begin.final_lsn;
      tx_ordinal_ = 0;
      lsn_text_ = begin.final_lsn.ToString();
      xid_text_ = std::to_string(begin.xid);
      time_text_ = std::to_string(slot::PgTimeToUnixMicros(begin.commit_time));
      return Status::Ok();
    }
    case TransactionAssembler::Boundary::kCommit:
      tracker_.CommitTransaction(tx_, e.end_lsn);
      tx_ = 0;
      stats_.transactions.fetch_add(1, std::memory_order_relaxed);
      return Status::Ok();
    case TransactionAssembler::Boundary::kNone:
      break;
    default:
      return DataLossError(
          "unexpected streaming or two-phase message (walrelay starts replication without "
          "streaming and two_phase)");
  }
  if (const auto* rel = std::get_if<pgoutput::Relation>(&m)) {
    mapper_.OnRelation(*rel);
  } else if (const auto* ins = std::get_if<pgoutput::Insert>(&m)) {
    if (!mapper_.IsOutbox(ins->relation_id)) return Status::Ok();
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
    if (mapper_.IsOutbox(del->relation_id)) stats_.skipped_deletes.fetch_add(1, std::memory_order_relaxed);
  } else if (const auto* tr = std::get_if<pgoutput::Truncate>(&m)) {
    for (auto oid : tr->relation_ids) {
      if (mapper_.IsOutbox(oid)) {
        stats_.skipped_truncates.fetch_add(1, std::memory_order_relaxed);
        spdlog::warn("TRUNCATE of outbox table {} seen (nothing to publish)", mapper_.TableName(oid));
      }
    }
  } else if (const auto* msg = std::get_if<pgoutput::LogicalMessage>(&m)) {
    if (!mapper_.IsOutboxMessage(*msg)) {
      stats_.skipped_messages.fetch_add(1, std::memory_order_relaxed);
      return Status::Ok();
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

Status Relay::Session::HandleXLogData(const slot::XLogData& x) {
  stats_.bytes_received.fetch_add(x.data.size(), std::memory_order_relaxed);
  pgoutput::DecodeOptions opts;
  opts.protocol_version = 1;
  Status st = pgoutput::Decode(x.data, opts, &message_);
  if (!st.ok()) return st.WithContext("at WAL position " + x.wal_start.ToString());
  auto event = assembler_.Feed(message_);
  if (!event.ok()) return event.status().WithContext("at WAL position " + x.wal_start.ToString());
  WALRELAY_RETURN_IF_ERROR(HandleMessage(message_, *event));
  if (x.wal_end > received_) received_ = x.wal_end;
  return Status::Ok();
}

Status Relay::Session::SendStatus(bool reply_requested) {
  Lsn flush = tracker_.FlushLsn();
  WALRELAY_RETURN_IF_ERROR(
      conn_->SendStatus(std::max(received_, flush), flush, flush, reply_requested));
  reported_events_total_ = tracker_.FlushedEventsTotal();
  stats_.flush_lsn.store(flush.value, std::memory_order_relaxed);
  stats_.received_lsn.store(received_.value, std::memory_order_relaxed);
  if (flush != last_sent_flush_) {
    spdlog::debug("confirmed flush position {}", flush.ToString());
    last_sent_flush_ = flush;
  }
  next_status_ = Clock::now() + status_interval_;
  return Status::Ok();
}

Status Relay::Session::Stream() {
  while (!relay_.stop_.load(std::memory_order_relaxed)) {
    producer_->Poll(milliseconds(0));
    if (!delivery_failure_.ok()) return delivery_failure_;
    WALRELAY_RETURN_IF_ERROR(producer_->fatal());
    stats_.in_flight_events.store(UnconfirmedEvents(), std::memory_order_relaxed);
    stats_.in_flight_bytes.store(in_flight_bytes_, std::memory_order_relaxed);

    if (Clock::now() >= next_status_) WALRELAY_RETURN_IF_ERROR(SendStatus(false));

    if (AtCapacity()) {
      // Backpressure: read nothing; serve acks, and confirm at once what became
      // confirmable so the window reopens without waiting for the status period.
      if (tracker_.FlushLsn() != last_sent_flush_) WALRELAY_RETURN_IF_ERROR(SendStatus(false));
      producer_->Poll(milliseconds(5));
      continue;
    }
    auto wait = std::chrono::duration_cast<milliseconds>(next_status_ - Clock::now());
    wait = std::clamp(wait, milliseconds(0), milliseconds(tracker_.InFlightEvents() ? 1 : 100));
    WALRELAY_ASSIGN_OR_RETURN(slot::Frame frame, conn_->Read(wait));
    switch (frame.kind) {
      case slot::Frame::Kind::kXLogData:
        WALRELAY_RETURN_IF_ERROR(HandleXLogData(frame.xlog));
        break;
      case slot::Frame::Kind::kKeepalive: {
        const slot::PrimaryKeepalive& k = frame.keepalive;
        stats_.server_wal_end.store(k.wal_end.value, std::memory_order_relaxed);
        if (k.wal_end > received_) received_ = k.wal_end;
        // Everything before this keepalive has been read; with nothing open or in flight
        // its position can be confirmed (an idle outbox must not pin WAL).
        if (!assembler_.in_transaction()) tracker_.ObserveIdlePosition(k.wal_end);
        if (k.reply_requested) WALRELAY_RETURN_IF_ERROR(SendStatus(false));
        break;
      }
      case slot::Frame::Kind::kEndOfStream:
        return UnavailableError("the server ended the replication stream");
      case slot::Frame::Kind::kTimeout:
        break;
    }
  }
  return Drain();
}

Status Relay::Session::Drain() {
  spdlog::info("stopping: waiting up to {} ms for {} in-flight events",
               config_.shutdown_timeout.count(), tracker_.InFlightEvents());
  Status flushed = producer_->Flush(config_.shutdown_timeout);
  if (!delivery_failure_.ok()) spdlog::warn("{}", delivery_failure_.ToString());
  Status st = SendStatus(false);
  spdlog::info("stopped at flush position {} ({} events still unacked will be replayed)",
               tracker_.FlushLsn().ToString(), tracker_.InFlightEvents());
  (void)flushed;
  return st;
}

Relay::Relay(RelayConfig config) : config_(std::move(config)) {}
Relay::~Relay() = default;

std::string Relay::bootstrap_servers() const {
  if (embedded_) return embedded_->cluster->bootstraps();
  return config_.bootstrap_servers;
}

Status Relay::Run() {
  if (config_.embedded_kafka && !embedded_) {
    WALRELAY_ASSIGN_OR_RETURN(auto cluster, kafka::MockCluster::Create(3));
    embedded_ = std::make_unique<Embedded>();
    embedded_->cluster = std::move(cluster);
    spdlog::info("embedded Kafka (librdkafka mock cluster) at {}", embedded_->cluster->bootstraps());
  }
  std::mt19937_64 rng(std::random_device{}());
  milliseconds backoff = config_.reconnect_min;
  bool first = true;
  while (!stop_.load()) {
    Status st;
    {
      Session session(*this);
      st = session.Start();
      if (st.ok()) {
        backoff = config_.reconnect_min;
        first = false;
        st = session.Stream();
        if (st.ok()) return st;  // stopped on request
      }
    }
    if (!Retryable(st) || (first && st.code() == StatusCode::kFailedPrecondition &&
                           st.message().find("wal_level") != std::string::npos)) {
      spdlog::error("{}", st.ToString());
      return st;
    }
    stats_.restarts.fetch_add(1);
    milliseconds delay(std::uniform_int_distribution<int64_t>(backoff.count() / 2, backoff.count())(rng));
    spdlog::warn("session failed: {}; restarting from the slot's confirmed position in {} ms",
                 st.ToString(), delay.count());
    backoff = std::min(backoff * 2, config_.reconnect_max);
    for (auto until = Clock::now() + delay; Clock::now() < until && !stop_.load();) {
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
  return Status::Ok();
}

}  // namespace walrelay::relay
