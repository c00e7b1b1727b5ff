// Relay: the outbox pipeline. One thread streams the logical slot, decodes pgoutput, maps
// outbox rows and messages to Kafka records, produces them with the idempotent producer,
// turns delivery reports into the flush LSN (AckTracker) and sends it back to PostgreSQL.
//
//   slot (CopyBoth) ─► pgoutput::Decode ─► TransactionAssembler ─► OutboxMapper
//        ▲                                                            │
//        └── standby status (flush = AckTracker::FlushLsn) ◄── acks ◄─ kafka::Producer
//
// Progress tracking. Transactions arrive in commit order (streaming of in-progress
// transactions is off, so a transaction's changes arrive together, after it committed).
// Events are produced as they arrive; a transaction's Commit end_lsn becomes confirmable
// when it and every earlier transaction are fully acked. While nothing is open or in
// flight, the server's keepalive position is confirmed so an idle outbox never pins WAL.
//
// Failure handling is crash-only: any failure of a session (connection lost, malformed
// bytes, a failed delivery report, fatal producer error, dead-letter write failed) tears
// the whole session down — producer purged, connections closed, tracker dropped — and a
// new session starts, with a new producer, from the slot's confirmed_flush_lsn after a
// capped, jittered backoff (reset only after a session that streamed for 10 s). Replays
// may repeat a suffix of events (consumers dedup on the event id); they never lose or
// reorder one. Records never time out (invariant 9): a broker outage is waited out, not a
// failure. Errors that a retry cannot fix (malformed protocol bytes, missing privileges,
// a bad configuration) end Run() with that error; no event's content is such an error.
//
// Kafka errors by class: a batch the broker refuses restarts the session with half the
// batch.size (a record refused alone is dead-lettered); a topic that does not exist or
// may not be written is retried for kafka_topic_error_timeout (/readyz names it), then its
// events are dead-lettered (TopicErrors).
//
// Backpressure: while max_in_flight_events or max_in_flight_bytes are reached, the relay
// stops reading the replication stream and only serves delivery reports and status
// updates; memory does not grow with transaction size.
//
// Unmappable events (NULL aggregate_id, missing column, invalid envelope, a reserved header
// name, a record larger than Kafka accepts, a topic failing past its bound) are written to
// the dead-letter table with their reason and LSN and then count as acked: never dropped
// silently, never blocking the stream. Any bytes fit the dead-letter table; a failed
// write restarts the session, it never ends Run().
//
// Thread safety: Run() on one thread; RequestStop() and stats() from any thread or a
// signal handler (RequestStop only stores an atomic flag).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "base/status.h"
#include "src/kafka/producer.h"
#include "src/relay/core/config.h"
#include "src/relay/core/kafka_client_errors.h"
#include "src/relay/core/progress_report.h"
#include "src/relay/core/relay_stats.h"
#include "src/relay/core/topic_errors.h"

namespace walrelay::relay {

class Relay {
 public:
  explicit Relay(RelayConfig config);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // Runs sessions until RequestStop() (then returns OK after a bounded drain and a final
  // status update) or an error no retry can fix (returned, not logged: the caller says it).
  Status Run();

  // Asks Run() to stop: stop reading, wait up to shutdown_timeout for in-flight acks,
  // confirm the last fully acked transaction, return. Async-signal-safe.
  void RequestStop() { stop_.store(true, std::memory_order_relaxed); }

  const RelayStats& stats() const { return stats_; }
  const RelayConfig& config() const { return config_; }

  // The metrics exposition (Prometheus text), as /metrics serves it; "" before Run().
  std::string RenderMetrics() const;
  // The port /metrics listens on (0 when off), e.g. after asking for port 0.
  int metrics_port() const;

  // The bootstrap servers in use (the embedded cluster's when kafka.embedded is set).
  // Valid once Run() has started the first session.
  std::string bootstrap_servers() const;

 private:
  class Session;
  struct Observability;
  Status StartObservability();
  // The producer's options: the configured properties and the current batch.size.
  kafka::ProducerOptions ProducerOptions() const;
  // --source-mode poll: one polling session (polling/poller.h) until stopped (OK) or failed.
  Status PollSession();

  RelayConfig config_;
  RelayStats stats_;
  std::atomic<bool> stop_{false};
  struct Embedded;
  std::unique_ptr<Embedded> embedded_;
  std::unique_ptr<TopicErrors> topic_errors_;  // across sessions
  // Authentication and TLS failures of the Kafka client, across sessions.
  const std::unique_ptr<KafkaClientErrors> kafka_client_errors_ =
      std::make_unique<KafkaClientErrors>();
  std::unique_ptr<Observability> obs_;
  bool guard_started_ = false;
  bool transport_warned_ = false;  // poll mode: the transport warning was logged
  ProgressReport progress_report_;  // the log's periodic summary, across sessions
  void LogProgress();                // logs progress_report_'s line when due
  // batch.size for new producers after the broker refused a batch; 0 = as configured.
  int64_t kafka_batch_size_ = 0;
};

}  // namespace walrelay::relay
