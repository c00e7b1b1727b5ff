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
// bytes, delivery failure after retries, fatal producer error, dead-letter write failed)
// tears the whole session down — producer purged, connections closed, tracker dropped —
// and a new session starts from the slot's confirmed_flush_lsn after a capped, jittered
// backoff. Replays may repeat a suffix of events (consumers dedup on the event id); they
// never lose or reorder one. Errors that a retry cannot fix (malformed protocol bytes,
// missing privileges, a bad configuration) end Run() with that error.
//
// Backpressure: while max_in_flight_events or max_in_flight_bytes are reached, the relay
// stops reading the replication stream and only serves delivery reports and status
// updates; memory does not grow with transaction size.
//
// Unmappable events (NULL aggregate_id, missing column, invalid envelope, a record larger
// than Kafka accepts) are written to the dead-letter table with their reason and LSN and
// then count as acked: never dropped silently, never blocking the stream.
//
// Thread safety: Run() on one thread; RequestStop() and stats() from any thread or a
// signal handler (RequestStop only stores an atomic flag).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "base/status.h"
#include "src/relay/config.h"
#include "src/relay/relay_stats.h"
#include "src/relay/topic_errors.h"

namespace walrelay::relay {

class Relay {
 public:
  explicit Relay(RelayConfig config);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // Runs sessions until RequestStop() (then returns OK after a bounded drain and a final
  // status update) or an error no retry can fix (returned).
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

  RelayConfig config_;
  RelayStats stats_;
  std::atomic<bool> stop_{false};
  struct Embedded;
  std::unique_ptr<Embedded> embedded_;
  std::unique_ptr<TopicErrors> topic_errors_;  // across sessions
  std::unique_ptr<Observability> obs_;
  bool guard_started_ = false;
  // batch.size for new producers after the broker refused a batch; 0 = as configured.
  int64_t kafka_batch_size_ = 0;
};

}  // namespace walrelay::relay
