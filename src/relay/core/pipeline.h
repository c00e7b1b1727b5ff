// Pipeline: the relay's streaming core, independent of where the replication frames come
// from (the live slot, or a recording being replayed) and where records go (Kafka, or
// nowhere for decode-and-map benchmarks). One Pipeline lives for one session.
//
//   FrameSource ─► pgoutput::Decode ─► TransactionAssembler ─► OutboxMapper ─► RecordSink
//        ▲                                                                        │
//        └──── SendStatus(flush = AckTracker::FlushLsn) ◄──── delivery reports ◄──┘
//
// See run/relay.h for the guarantees (acked-only flush, backpressure, dead letters, idle
// confirmation). Delivery reports: OK acks the event; kInvalidArgument (the record itself
// refused) dead-letters it from the record's own headers; kNotFound / kPermissionDenied
// start the topic's clock in TopicErrors; every other failure (kCancelled included: a
// purge happens only to restart) ends the session with the first failure. Before the
// first record of a topic the sink is asked whether the topic exists and may be written.
// Thread safety: single-threaded; the sink calls OnDelivery() on the pipeline's thread,
// from inside Produce/Poll/Flush.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "base/status.h"
#include "decoder/pgoutput.h"
#include "decoder/transaction_assembler.h"
#include "decoder/wal2json.h"
#include "slot/replication_connection.h"
#include "src/kafka/producer.h"
#include "src/metrics/registry.h"
#include "src/relay/core/ack_tracker.h"
#include "src/relay/core/config.h"
#include "src/relay/core/dead_letter.h"
#include "src/relay/core/exactly_once.h"
#include "src/relay/core/outbox_mapper.h"
#include "src/relay/core/record_builder.h"
#include "src/relay/core/relay_stats.h"
#include "src/relay/core/topic_errors.h"

namespace walrelay::relay {

// Where mapped records go. Every accepted Produce() gets exactly one delivery report,
// passed to the handler set with SetDeliveryHandler() from inside Produce/Poll/Flush.
class RecordSink {
 public:
  // `record` is null when the sink has no record to show (only consulted on failures).
  using DeliveryHandler = std::function<void(uint64_t cookie, const Status& status, size_t bytes,
                                             const kafka::DeliveredRecord* record)>;
  virtual ~RecordSink() = default;
  virtual void SetDeliveryHandler(DeliveryHandler handler) = 0;
  // kInvalidArgument: the record can never be delivered (dead-letter it); other errors
  // end the session. `timestamp_ms`: the record's timestamp, 0 = when produced.
  virtual Status Produce(std::string_view topic, std::string_view key, std::string_view value,
                         std::span<const kafka::Header> headers, uint64_t cookie,
                         int64_t timestamp_ms) = 0;
  virtual int Poll(std::chrono::milliseconds timeout) = 0;
  virtual Status Flush(std::chrono::milliseconds timeout) = 0;
  // OK, or the sticky fatal error that ends the session.
  virtual Status Fatal() const = 0;
  // Whether `topic` can take records: kNotFound / kPermissionDenied are the topic's own
  // fault (see TopicErrors); anything else means "produce and see". Blocks up to
  // `timeout` for the cluster's answer (brokers down: all of it).
  virtual Status CheckTopic(std::string_view /*topic*/, std::chrono::milliseconds /*timeout*/) {
    return Status::Ok();
  }
  // Purges what is queued and in flight and refuses new records, as a failed report
  // does (kafka::Producer::StopAfter); callable from the delivery handler.
  virtual void StopProducing(const Status& /*why*/) {}
  // A descriptor that is readable when Poll() has reports to serve, or -1. The pipeline
  // hands it to the frame source, which waits on it beside the database socket and drains
  // it when it wakes (FrameSource::SetWakeFd), so that a wait for the database ends when an
  // ack arrives instead of polling the sink every millisecond.
  virtual int WakeFd() const { return -1; }
  // Whether the sink ever reached its destination (kafka::Producer::BrokerReached).
  virtual bool BrokerReached() { return true; }
  // Kafka transactions (exactly-once mode; kafka::Producer's, whose errors they return).
  // Sinks without them refuse (kFailedPrecondition).
  virtual Status BeginTransaction() {
    return FailedPreconditionError("this sink has no transactions");
  }
  virtual Status CommitTransaction(std::chrono::milliseconds /*timeout*/) {
    return FailedPreconditionError("this sink has no transactions");
  }
  // True once a newer producer of the same transactional.id fenced this sink's.
  virtual bool Fenced() const { return false; }
};

// How long a session's producer may go without reaching any broker before it is news: a
// warning in the log, /readyz not ready, walrelay_kafka_unreached_seconds. A wrong address
// on an idle outbox otherwise looked healthy, since no event waited for an ack.
inline constexpr std::chrono::seconds kKafkaUnreachedIsNews{10};

// Watches whether a session's sink has reached a broker (RecordSink::BrokerReached):
// stats.kafka_unreached_since_us while it has not; past kKafkaUnreachedIsNews one warning
// naming the address, and a line when a broker answers after all. Costs one cheap call per
// Check() until the first broker answers, nothing after.
// Thread safety: one thread (the session's).
class BrokerReachWatch {
 public:
  BrokerReachWatch(RecordSink& sink, RelayStats& stats, std::string bootstrap_servers);
  ~BrokerReachWatch();  // the session ends: clears stats.kafka_unreached_since_us
  BrokerReachWatch(const BrokerReachWatch&) = delete;
  BrokerReachWatch& operator=(const BrokerReachWatch&) = delete;
  void Check();

 private:
  RecordSink& sink_;
  RelayStats& stats_;
  std::string bootstrap_servers_;
  bool reached_ = false;
  bool warned_ = false;
  std::chrono::steady_clock::time_point started_;
};

// Sets a delivery handler on a sink for this object's lifetime and clears it on every way
// out: handlers capture their caller's locals, and a sink that outlives them may still
// report (e.g. while purging).
class ScopedDeliveryHandler {
 public:
  ScopedDeliveryHandler(RecordSink& sink, RecordSink::DeliveryHandler handler) : sink_(sink) {
    sink_.SetDeliveryHandler(std::move(handler));
  }
  ~ScopedDeliveryHandler() { sink_.SetDeliveryHandler(nullptr); }
  ScopedDeliveryHandler(const ScopedDeliveryHandler&) = delete;
  ScopedDeliveryHandler& operator=(const ScopedDeliveryHandler&) = delete;

 private:
  RecordSink& sink_;
};

// The Kafka sink: the idempotent producer.
class KafkaSink : public RecordSink {
 public:
  static Result<std::unique_ptr<KafkaSink>> Create(kafka::ProducerOptions options);
  void SetDeliveryHandler(DeliveryHandler handler) override { handler_ = std::move(handler); }
  Status Produce(std::string_view topic, std::string_view key, std::string_view value,
                 std::span<const kafka::Header> headers, uint64_t cookie,
                 int64_t timestamp_ms) override {
    return producer_->Produce(topic, key, value, headers, cookie, timestamp_ms);
  }
  int Poll(std::chrono::milliseconds timeout) override { return producer_->Poll(timeout); }
  Status Flush(std::chrono::milliseconds timeout) override { return producer_->Flush(timeout); }
  Status Fatal() const override { return producer_->fatal(); }
  Status CheckTopic(std::string_view topic, std::chrono::milliseconds timeout) override {
    return producer_->CheckTopic(topic, timeout);
  }
  int WakeFd() const override { return producer_->wake_fd(); }
  void StopProducing(const Status& why) override { producer_->StopAfter(why); }
  bool BrokerReached() override { return producer_->BrokerReached(); }
  Status BeginTransaction() override { return producer_->BeginTransaction(); }
  Status CommitTransaction(std::chrono::milliseconds timeout) override {
    return producer_->CommitTransaction(timeout);
  }
  bool Fenced() const override { return producer_->fenced(); }
  kafka::Producer& producer() { return *producer_; }

 private:
  KafkaSink() = default;
  std::unique_ptr<kafka::Producer> producer_;
  DeliveryHandler handler_;
};

// Acknowledges every record at the next Poll(): decode-and-map only (replay benchmarks).
class NullSink : public RecordSink {
 public:
  void SetDeliveryHandler(DeliveryHandler handler) override { handler_ = std::move(handler); }
  Status Produce(std::string_view topic, std::string_view key, std::string_view value,
                 std::span<const kafka::Header> headers, uint64_t cookie,
                 int64_t timestamp_ms) override;
  int Poll(std::chrono::milliseconds timeout) override;
  Status Flush(std::chrono::milliseconds timeout) override;
  Status Fatal() const override { return Status::Ok(); }
  uint64_t records() const { return records_; }
  uint64_t bytes() const { return bytes_; }

 private:
  DeliveryHandler handler_;
  std::vector<std::pair<uint64_t, size_t>> pending_;  // cookie, bytes
  uint64_t records_ = 0, bytes_ = 0;
};

// Test-only failpoints, compiled in only when the tests are built (CMake
// WALRELAY_FAILPOINTS), armed by WALRELAY_RELAY_FAILPOINT; each breaks a guarantee on
// purpose, so that the chaos run (scripts/chaos.sh) can show that its verdict detects the
// breach:
//   confirm_before_ack  every session confirms the received position instead of the
//                       acknowledged one (invariant 1): loss on a crash
//   ignore_checkpoint   exactly-once mode: a session publishes what the checkpoint says
//                       Kafka has (src/relay/run/session.cc): duplicates after a restart
// The armed one (kNone: none, or not compiled in); logs once either way.
enum class RelayFailpoint { kNone, kConfirmBeforeAck, kIgnoreCheckpoint };
RelayFailpoint ArmedRelayFailpoint();

// How long events may wait in flight without any delivery report before the relay says it
// waits for Kafka (a warning in the log, /readyz not ready, walrelay_kafka_waiting_seconds):
// brokers down or unreachable, or fewer in-sync replicas than min.insync.replicas. Records
// never time out (invariant 9): the relay keeps waiting, and confirms nothing past them.
inline constexpr std::chrono::seconds kKafkaWaitIsNews{5};

class Pipeline {
 public:
  struct Options {
    std::chrono::milliseconds status_interval{1000};
    // Live slot: the end of the stream is a failure (retry). Recording: the end.
    bool end_of_stream_is_error = true;
    int protocol_version = 1;
    // Called about every 100 ms from the loop (heartbeats); an error ends the session.
    std::function<Status()> tick;
    // The outbox tables as the session resolved them with the server (OIDs and catalog
    // names); empty: the configured names, matched by name (recordings: no server).
    std::vector<OutboxTable> outbox_tables;
    // Latency histograms (seconds); null = not measured.
    metrics::Histogram* produce_latency = nullptr;        // produce -> Kafka ack, per event
    metrics::Histogram* commit_to_ack_latency = nullptr;  // commit -> last ack, per transaction
    // Topic-scoped failures across sessions (bounded retry, then dead letters); null =
    // every such failure ends the session.
    TopicErrors* topic_errors = nullptr;
    // The slot's trust (invariant 11, progress.h): set, the pipeline confirms no further
    // than the last position it recorded through it, and records a new one (everything
    // before it acked or dead-lettered) before confirming it: at most every 100 ms while
    // events flow (every 10 ms while the backpressure cap waits for confirmations), every
    // second while idle (a record writes WAL, which an idle stream would confirm again),
    // and at the drain; while a record is held back (below) the call repeats at those
    // gaps. It returns the position the pipeline may confirm: the one recorded, or an
    // earlier record's while a later one waits (DeliveredRecorder: a failover slot's
    // standbys must hold the record first). An error ends the session. Null: no gate (a
    // recording, the benchmarks). `confirm_limit` is the position recorded before.
    std::function<Result<Lsn>(Lsn)> record_confirmable;
    Lsn confirm_limit;
    // Exactly-once mode (kafka.exactly_once; core/exactly_once.h): set, records go
    // into Kafka transactions that hold whole source transactions, each with a checkpoint
    // record; the slot is confirmed no further than what committed; source transactions
    // the checkpoint says Kafka has are skipped. Null: the idempotent mode.
    struct ExactlyOnce {
      TransactionBatcher batcher{std::chrono::milliseconds(100), 100000};
      ResumeDecision resume;
      std::string checkpoint_topic;
      std::string checkpoint_key;
      std::chrono::milliseconds commit_timeout{60000};
      // The producer's transaction.timeout.ms: a Kafka transaction open longer is aborted
      // by its coordinator, and its commit fails; the error then says so, with the fix.
      std::chrono::milliseconds transaction_timeout{60000};
      metrics::Histogram* transaction_records = nullptr;  // records per committed transaction
      metrics::Histogram* commit_latency = nullptr;       // commit_transaction's duration
    };
    ExactlyOnce* exactly_once = nullptr;
  };

  // Exactly-once mode: a Kafka transaction is open (records produced, not committed).
  bool kafka_transaction_open() const { return kafka_tx_open_; }
  // Run() ended because Kafka acknowledged nothing of the oldest unconfirmed transaction
  // for config.kafka_wait_yield: the relay lets go of the slot for a while.
  bool yielded() const { return yielded_; }

  // All references must outlive the Pipeline. The Pipeline sets itself as the sink's
  // delivery handler and clears it again when destroyed, so a sink that outlives it (and
  // reports, e.g. while purging) never calls into a destroyed Pipeline.
  Pipeline(const RelayConfig& config, RelayStats& stats, slot::FrameSource& source,
           RecordSink& sink, DeadLetterSink& dead_letters, Options options);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Streams until `stop` is set (then drains: bounded wait for acks, final status; OK),
  // until the end of a recording (drains; OK), or a failure (returned; nothing drained —
  // the next session replays from the confirmed position).
  Status Run(const std::atomic<bool>& stop);

  Lsn flush_lsn() const { return tracker_.FlushLsn(); }
  // The position the pipeline may confirm now: flush_lsn() within the recorded limit.
  Lsn confirmable_lsn() const;

  // The flush position last sent to PostgreSQL (the slot's confirmed position): every
  // transaction whose commit ended at or before it was acked by Kafka or dead-lettered.
  // Lost-slot recovery records a snapshot bound once this passes the bound's LSN.
  Lsn confirmed_lsn() const { return last_sent_flush_; }

 private:
  // One frame from the source; *ended is set at the end of a recording (a live stream's
  // end is an error).
  Status HandleFrame(const slot::Frame& frame, bool* ended);
  Status HandleXLogData(const slot::XLogData& x);
  // config.plugin == "wal2json": one document -> its messages, through HandleMessage.
  Status HandleWal2Json(const slot::XLogData& x);
  Status HandleMessage(const pgoutput::Message& m, const pgoutput::TransactionAssembler::Event& e);
  Status PublishOrDeadLetter(const Status& mapped, std::string_view source,
                             std::string_view payload_for_dead_letter);
  Status WriteDeadLetter(const DeadLetter& letter);
  // Before the first record of `topic` (and again every 10 s while it fails): asks the
  // sink. Sets *dead_letter_reason when the topic has failed past the bound; kUnavailable
  // (the session restarts) while it is within it.
  Status CheckTopic(std::string_view topic, std::string* dead_letter_reason);
  DeadLetter LetterForCurrent(std::string_view source, std::string_view reason,
                              std::string_view payload) const;
  // Sends the standby status update; `final` records the position at once (the drain).
  Status SendStatus(bool reply_requested, bool final = false);
  // What is acked (tracker_, or the failpoint's received position): before the gate.
  Lsn Acked() const;
  // Records Acked() through options_.record_confirmable when it passed the limit and at
  // least `min_gap` passed since the last record.
  Status RaiseConfirmLimit(std::chrono::milliseconds min_gap);
  Status Drain();
  void OnHeartbeat(std::string_view content);
  void OnDelivery(uint64_t cookie, const Status& status, size_t bytes,
                  const kafka::DeliveredRecord* record);
  // Events PostgreSQL would resend if the relay died now: produced in transactions not
  // yet confirmed by a status update.
  uint64_t UnconfirmedEvents() const {
    return tracker_.UnflushedEvents() + (tracker_.FlushedEventsTotal() - reported_events_total_);
  }
  // Backpressure. Unacked events and bytes are capped always (memory stays bounded
  // whatever the transaction size). Unconfirmed events are capped too, but only between
  // transactions: inside one they cannot shrink before its Commit is read, so waiting
  // there would stall a transaction larger than the cap forever. A crash therefore
  // replays at most the cap plus the transaction being read.
  bool AtCapacity() const {
    const uint64_t cap = static_cast<uint64_t>(config_.max_in_flight_events);
    if (tracker_.InFlightEvents() >= cap ||
        in_flight_bytes_ >= static_cast<uint64_t>(config_.max_in_flight_bytes)) {
      return true;
    }
    return !assembler_.in_transaction() && UnconfirmedEvents() >= cap;
  }

  const RelayConfig& config_;
  RelayStats& stats_;
  slot::FrameSource& source_;
  RecordSink& sink_;
  DeadLetterSink& dead_letters_;
  Options options_;

  OutboxMapper mapper_;
  AckTracker tracker_;
  bool confirm_before_ack_ = false;  // ArmedRelayFailpoint()
  pgoutput::TransactionAssembler assembler_;
  pgoutput::Message message_;
  std::unique_ptr<wal2json::Wal2JsonDecoder> wal2json_;  // set when the plugin is wal2json
  std::unordered_set<pgoutput::Oid> foreign_relations_;  // non-outbox relations reported
  std::vector<pgoutput::Message> wal2json_messages_;
  OutboxEvent event_;
  RecordBuilder record_;  // the current event's record
  struct TopicCheck {
    Status status;  // kNotFound / kPermissionDenied, or OK
    std::chrono::steady_clock::time_point recheck;
  };
  std::map<std::string, TopicCheck, std::less<>> topic_checks_;

  AckTracker::Tx tx_ = 0;
  Lsn tx_commit_lsn_;
  uint32_t tx_xid_ = 0;
  uint32_t tx_ordinal_ = 0;
  bool tx_produced_ = false;  // the open transaction handed a record to the sink
  // Exactly-once mode: a Kafka transaction is open; the source transaction being read is
  // one the checkpoint says Kafka already has (its events are skipped).
  bool kafka_tx_open_ = false;
  std::chrono::steady_clock::time_point kafka_tx_began_;  // when the open Kafka transaction began
  bool tx_already_published_ = false;
  // Exactly-once mode: commits the open Kafka transaction with its checkpoint record.
  Status CommitKafkaTransaction();
  // The checkpoint record's cookie: no AckTracker token (those are transaction numbers).
  static constexpr uint64_t kCheckpointCookie = UINT64_MAX;
  uint64_t in_flight_bytes_ = 0;
  Status delivery_failure_;  // first failed delivery report: ends the session
  Lsn received_;
  // wal_end of the frame being handled: the walsender sends a Commit in a frame whose
  // wal_end is the transaction's end LSN, so a Commit claiming more is corrupt (and would
  // confirm WAL the server never sent, skipping it for good).
  Lsn frame_end_;
  Lsn last_sent_flush_;
  Lsn confirm_limit_;  // options_.confirm_limit, then each position recorded
  std::chrono::steady_clock::time_point last_record_;
  uint64_t events_at_record_ = 0;  // tracker_.FlushedEventsTotal() at the last released record
  // Records not yet released for confirming (record_confirmable): position, events then.
  std::deque<std::pair<Lsn, uint64_t>> records_held_;
  uint64_t reported_events_total_ = 0;  // FlushedEventsTotal() at the last status update
  // Committed transactions not yet fully acked, with their commit time (commit-to-ack
  // latency).
  void RetireAcked();
  // stats_.oldest_unconfirmed_commit_us from pending_commits_.front().
  void PublishOldestPending();
  // A record Kafka refused for good, dead-lettered from its own headers; then it counts as
  // handled (a failed write ends the session).
  void DeadLetterRecord(uint64_t cookie, const kafka::DeliveredRecord& record,
                        const std::string& reason);
  // stats_.kafka_waiting_since_us, and the log lines when a wait starts being news and
  // when it ends. Past config_.kafka_wait_yield, an error that ends the session (yielded()).
  Status NoteKafkaWait();
  bool yielded_ = false;
  AckTracker::FrontProgress progress_at_wait_;  // when the wait was last reset
  std::chrono::steady_clock::time_point quiet_since_;
  bool wait_logged_ = false;
  int64_t tx_commit_time_us_ = 0;
  struct PendingCommit {
    AckTracker::Tx tx;
    int64_t commit_time_us;
  };
  std::deque<PendingCommit> pending_commits_;
  BrokerReachWatch reach_;
  std::chrono::steady_clock::time_point next_status_;
  std::chrono::steady_clock::time_point next_tick_;
};

}  // namespace walrelay::relay
