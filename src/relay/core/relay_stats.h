// RelayStats: the relay's counters and gauges, written by the pipeline thread and read by
// the metrics endpoint and tests. Relaxed atomics: each value is exact, the set is not a
// snapshot.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace walrelay::relay {

// Counters exported as metrics. Monotonic unless noted; read with relaxed loads.
struct RelayStats {
  std::atomic<uint64_t> events_produced{0};             // handed to the producer
  std::atomic<uint64_t> events_acked{0};                // delivery report OK
  std::atomic<uint64_t> events_dead_lettered{0};        // written to the dead-letter table
  std::atomic<uint64_t> dead_letter_write_failures{0};  // failed writes (session restarted)
  std::atomic<uint64_t> transactions{0};                // Commit messages seen
  std::atomic<uint64_t> skipped_updates{0};             // UPDATE on an outbox table (not published)
  std::atomic<uint64_t> skipped_deletes{0};
  std::atomic<uint64_t> skipped_truncates{0};
  std::atomic<uint64_t> skipped_messages{0};      // logical messages with another prefix
  // Exactly-once mode: events of source transactions the checkpoint says Kafka already has
  // (read again after a restart, not published again), and Kafka transactions committed.
  std::atomic<uint64_t> skipped_already_published{0};
  std::atomic<uint64_t> kafka_transactions_committed{0};
  // Kafka transactions that ended without a commit (a failed commit, or a session that
  // ended with one open: the next session's producer init aborts it); none of their records
  // is visible to read_committed readers, and the next session reads them again.
  std::atomic<uint64_t> kafka_transactions_aborted{0};
  // Sessions whose producer was fenced by another relay of the stream, and a gauge: 1 while
  // this relay stands by because it was fenced (until it streams again).
  std::atomic<uint64_t> kafka_fenced{0};
  std::atomic<int> fenced{0};
  std::atomic<uint64_t> skipped_other_tables{0};  // INSERTs into tables that are not outboxes
  std::atomic<uint64_t> bytes_received{0};        // pgoutput payload bytes
  std::atomic<uint64_t> restarts{0};              // sessions torn down and restarted
  // Sessions ended because Kafka acknowledged nothing for flow.kafka_wait_yield_ms.
  std::atomic<uint64_t> kafka_wait_yields{0};
  // Broker connections that failed or were closed (librdkafka reconnects by itself).
  // Mutable: the producer options, made by a const method, point at it.
  mutable std::atomic<uint64_t> kafka_transport_errors{0};
  std::atomic<uint64_t> in_flight_events{0};      // gauge
  std::atomic<uint64_t> in_flight_bytes{0};       // gauge
  std::atomic<uint64_t> flush_lsn{0};             // gauge: last confirmed position
  std::atomic<uint64_t> received_lsn{0};          // gauge: last position received
  std::atomic<uint64_t> server_wal_end{0};        // gauge: server's WAL end (keepalive)
  std::atomic<int> streaming{0};                  // gauge: 1 while a session streams
  // Liveness: advanced by the relay's loops (the session's tick, about every 100 ms, and
  // every wait between sessions); a watchdog (systemd's) sees a stuck relay by it.
  std::atomic<uint64_t> loop_ticks{0};
  std::atomic<int> standby{0};      // gauge: 1 while another process holds the slot
  std::atomic<int> standby_for{0};  // the PID holding it (while standby), 0 if unknown
  std::atomic<uint64_t> heartbeats{0};            // heartbeat messages seen in the stream
  std::atomic<uint64_t> heartbeats_sent{0};       // heartbeat messages emitted
  std::atomic<uint64_t> slot_recoveries{0};       // lost-slot recoveries completed
  // A recovery backfill under way (1) and its rows (done: published or dead-lettered):
  // /readyz and systemd's STATUS say so while it runs.
  std::atomic<int> recovering{0};
  std::atomic<uint64_t> recovery_rows_done{0};
  std::atomic<uint64_t> recovery_rows_expected{0};
  std::atomic<int64_t> heartbeat_lag_us{-1};      // gauge: emit -> seen, -1 before the first
  // gauge: commit time (Unix µs, the server's clock) of the oldest transaction read whose
  // events are not all confirmed yet; 0 when none is waiting.
  std::atomic<int64_t> oldest_unconfirmed_commit_us{0};
  // gauge: wall time (Unix µs) since which events sent to Kafka have had no delivery
  // report (the last report, or the send that ended an idle spell); 0 while none is in
  // flight or reports keep arriving. Past kKafkaWaitIsNews (pipeline.h), /readyz says the
  // relay waits for Kafka.
  std::atomic<int64_t> kafka_waiting_since_us{0};
  // gauge: wall time (Unix µs) since which this session's producer has reached no broker
  // (pipeline.h, BrokerReachWatch); 0 once one answered, or between sessions.
  std::atomic<int64_t> kafka_unreached_since_us{0};
  // Poll mode (polling/poller.h).
  std::atomic<int> polling{0};                       // gauge: 1 while a poll session runs
  std::atomic<uint64_t> poll_failed_produces{0};     // rows whose produce failed (retried)
  std::atomic<uint64_t> poll_backlog_rows{0};        // gauge: unpublished rows
  std::atomic<int64_t> poll_oldest_age_ms{0};        // gauge: age of the oldest unpublished row
  std::atomic<uint64_t> poll_retrying_rows{0};       // gauge: unpublished rows with retry_count > 0
  // gauge: the batch.size sessions use after the broker refused a batch; 0 = as configured.
  std::atomic<int64_t> kafka_batch_size{0};

  // What the relay's thread has waited for the server longer than a second (the
  // statement's context, slot/pg_error.h ServerWaitObserver) and for how long; empty when
  // it waits for nothing. systemd's STATUS and /readyz say it.
  void SetServerWait(std::string what) {
    std::lock_guard lock(server_wait_mutex_);
    server_wait_ = std::move(what);
  }
  std::string ServerWait() const {
    std::lock_guard lock(server_wait_mutex_);
    return server_wait_;
  }
  // Why the last session ended (its error), for /readyz while no session streams.
  void SetLastSessionError(std::string what) {
    std::lock_guard lock(server_wait_mutex_);
    last_session_error_ = std::move(what);
  }
  std::string LastSessionError() const {
    std::lock_guard lock(server_wait_mutex_);
    return last_session_error_;
  }

 private:
  mutable std::mutex server_wait_mutex_;  // guards both strings
  std::string server_wait_;
  std::string last_session_error_;
};

}  // namespace walrelay::relay
