// The names and HELP texts of every metric walrelay exports, in one place, so that the
// relay, the slot guard, `walrelay lag --prometheus` and the Grafana dashboard
// (docker/grafana/walrelay-dashboard.json) cannot drift apart. Prometheus conventions:
// base units (bytes, seconds), counters end in _total.
//
// LSNs are exported as gauges of their 64-bit value; a double holds them exactly up to
// 2^53 bytes of WAL (8 PiB), enough for any real server.
#pragma once

#include <string_view>

namespace walrelay::relay::metric_names {

struct MetricName {
  std::string_view name;
  std::string_view help;
};

// --- relay pipeline (RelayStats)
inline constexpr MetricName kEventsProduced{"walrelay_events_produced_total",
                                            "Events handed to the Kafka producer."};
inline constexpr MetricName kEventsPublished{"walrelay_events_published_total",
                                             "Events acknowledged by Kafka (delivery report OK)."};
inline constexpr MetricName kEventsDeadLettered{
    "walrelay_events_dead_lettered_total",
    "Unmappable events written to the dead-letter table (then confirmed)."};
inline constexpr MetricName kDeadLetterWriteFailures{
    "walrelay_dead_letter_write_failures_total",
    "Dead-letter writes that failed; the event stayed unconfirmed and the session restarted."};
// Label kind = update | delete | truncate | message | other_table.
inline constexpr MetricName kEventsSkipped{
    "walrelay_events_skipped_total",
    "Changes seen but not published, by kind (update, delete, truncate, foreign message, "
    "insert into a table that is not a configured outbox)."};
inline constexpr MetricName kTransactions{"walrelay_transactions_total",
                                          "Committed transactions received from the slot."};
inline constexpr MetricName kReceivedBytes{"walrelay_received_bytes_total",
                                           "pgoutput payload bytes received from the slot."};
inline constexpr MetricName kRestarts{"walrelay_restarts_total",
                                      "Sessions torn down and restarted from confirmed_flush_lsn."};
inline constexpr MetricName kKafkaWaitYields{
    "walrelay_kafka_wait_yields_total",
    "Sessions ended because Kafka acknowledged nothing of the oldest unconfirmed transaction "
    "for flow.kafka_wait_yield_ms; each let go of the slot so that a standby could take "
    "over."};
inline constexpr MetricName kKafkaTransportErrors{
    "walrelay_kafka_transport_errors_total",
    "Broker connections of the producer that failed or were closed (refused, reset, timed "
    "out); librdkafka reconnects by itself, records wait and are never dropped."};
inline constexpr MetricName kInFlightEvents{"walrelay_in_flight_events",
                                            "Events produced and not yet acknowledged."};
inline constexpr MetricName kInFlightBytes{"walrelay_in_flight_bytes",
                                           "Bytes of events produced and not yet acknowledged."};
inline constexpr MetricName kFlushLsn{
    "walrelay_flush_lsn", "Last LSN confirmed to PostgreSQL (flush position), as a number."};
inline constexpr MetricName kReceivedLsn{"walrelay_received_lsn",
                                         "Last LSN received from the slot, as a number."};
inline constexpr MetricName kServerWalEndLsn{
    "walrelay_server_wal_end_lsn", "Server WAL end reported in the last keepalive, as a number."};
inline constexpr MetricName kFlushLagBytes{
    "walrelay_flush_lag_bytes",
    "Server WAL end minus the confirmed flush LSN: WAL not yet confirmed by the relay."};
inline constexpr MetricName kKafkaBatchSize{
    "walrelay_kafka_batch_size_bytes",
    "batch.size in use after the broker refused a batch of records (halved per refusal); 0 = "
    "as configured."};
inline constexpr MetricName kKafkaFailingTopics{
    "walrelay_kafka_failing_topics",
    "Topics that do not exist or may not be written: their events are retried for "
    "--kafka-topic-error-timeout-ms, then dead-lettered."};
inline constexpr MetricName kKafkaClientErrors{
    "walrelay_kafka_client_errors_total",
    "Authentication (SASL) and TLS failures of the Kafka client: no record is delivered "
    "until the configuration is fixed (events wait in the slot; /readyz says why)."};
inline constexpr MetricName kStreaming{
    "walrelay_streaming", "1 while a replication session is streaming, else 0 (connection state)."};
inline constexpr MetricName kStandby{
    "walrelay_standby",
    "1 while another process reads the slot and this relay stands by to take over, else 0."};
// --- poll mode (polling/poller.h)
inline constexpr MetricName kPolling{"walrelay_polling",
                                     "1 while a poll-mode session runs, else 0."};
inline constexpr MetricName kPollRows{"walrelay_poll_rows",
                                      "Rows read per polling transaction (histogram)."};
inline constexpr MetricName kPollFailedPublishes{
    "walrelay_poll_failed_publishes_total",
    "Rows whose publish failed (topic missing or not writable); retried, then dead-lettered."};
inline constexpr MetricName kPollBacklogRows{
    "walrelay_poll_backlog_rows", "Outbox rows not yet published (this replica's shard)."};
inline constexpr MetricName kPollRetryingRows{
    "walrelay_poll_retrying_rows", "Unpublished outbox rows that failed at least once."};
inline constexpr MetricName kPollOldestUnpublished{
    "walrelay_poll_oldest_unpublished_seconds",
    "Age (by created_at) of the oldest unpublished outbox row; 0 when there is none."};
// Histograms (seconds; metrics::DefaultLatencyBuckets()).
inline constexpr MetricName kProduceLatency{"walrelay_produce_latency_seconds",
                                            "Time from produce() to the Kafka delivery report."};
// --- exactly-once mode (kafka.exactly_once)
inline constexpr MetricName kKafkaTransactionsCommitted{
    "walrelay_kafka_transactions_committed_total",
    "Exactly-once mode: Kafka transactions committed (each holds whole source transactions "
    "and a checkpoint record)."};
inline constexpr MetricName kKafkaTransactionsAborted{
    "walrelay_kafka_transactions_aborted_total",
    "Exactly-once mode: Kafka transactions that ended without a commit (a failed commit, or a "
    "session that ended with one open); nothing of them is visible, the next session reads "
    "them again."};
inline constexpr MetricName kKafkaFenced{
    "walrelay_kafka_fenced_total",
    "Exactly-once mode: sessions whose producer was fenced by another relay of the same stream "
    "(a take-over while this one was paused or cut off); it stood by."};
inline constexpr MetricName kKafkaFencedNow{
    "walrelay_kafka_fenced",
    "Exactly-once mode: 1 while this relay stands by because another relay fenced it."};
inline constexpr MetricName kKafkaTransactionRecords{
    "walrelay_kafka_transaction_records",
    "Exactly-once mode: event records per committed Kafka transaction (histogram)."};
inline constexpr MetricName kKafkaTransactionCommitLatency{
    "walrelay_kafka_transaction_commit_seconds",
    "Exactly-once mode: time commit_transaction took (flushing the transaction's records and "
    "the coordinator's commit), histogram."};
inline constexpr MetricName kCommitToAckLatency{
    "walrelay_commit_to_ack_latency_seconds",
    "Time from the transaction's commit timestamp to the Kafka ack of its last event."};

// --- heartbeats
inline constexpr MetricName kHeartbeatsSent{
    "walrelay_heartbeats_sent_total", "Heartbeat messages emitted with pg_logical_emit_message."};
inline constexpr MetricName kHeartbeatsReceived{"walrelay_heartbeats_received_total",
                                                "Heartbeat messages seen in the stream."};
inline constexpr MetricName kHeartbeatLag{
    "walrelay_heartbeat_lag_seconds",
    "End-to-end lag of the last heartbeat seen in the stream (receive time minus emit time)."};
inline constexpr MetricName kLastHeartbeat{
    "walrelay_last_heartbeat_timestamp_seconds",
    "Unix time at which the last heartbeat was seen in the stream."};

// --- lost-slot recovery
inline constexpr MetricName kJanitorDeleted{
    "walrelay_outbox_janitor_deleted_rows_total",
    "Outbox rows the janitor deleted (older than outbox.retention_ms and delivered)."};
inline constexpr MetricName kJanitorDroppedPartitions{
    "walrelay_outbox_janitor_dropped_partitions_total",
    "Outbox partitions the janitor dropped (outbox.cleanup partitions: older than "
    "outbox.retention_ms, every row delivered)."};
inline constexpr MetricName kJanitorFailures{
    "walrelay_outbox_janitor_failures_total",
    "Janitor rounds that failed (logged; the rows stay until a later round)."};
// Table health (lifecycle/table_health.h), label table=<schema.table>.
inline constexpr MetricName kTableLiveRows{"walrelay_table_live_rows",
                                           "Live tuples of the table (pg_stat_user_tables)."};
inline constexpr MetricName kTableDeadRows{
    "walrelay_table_dead_rows", "Dead tuples of the table, not yet vacuumed (pg_stat_user_tables)."};
inline constexpr MetricName kTableSecondsSinceVacuum{
    "walrelay_table_seconds_since_vacuum",
    "Seconds since the table's last vacuum or autovacuum; -1 when it never ran."};
inline constexpr MetricName kTableSecondsSinceAnalyze{
    "walrelay_table_seconds_since_analyze",
    "Seconds since the table's last analyze or autoanalyze; -1 when it never ran."};
inline constexpr MetricName kTableSizeBytes{
    "walrelay_table_size_bytes", "Total size of the table with its indexes and TOAST."};
inline constexpr MetricName kTableInvalidIndexes{
    "walrelay_table_invalid_indexes",
    "Invalid indexes of the table (a failed CREATE INDEX CONCURRENTLY): drop and rebuild them."};
inline constexpr MetricName kTablePartitions{
    "walrelay_table_partitions",
    "Partitions of the table (0: not partitioned); outbox.cleanup partitions keeps the "
    "retention's worth plus a week (or 48 hours) ahead."};
inline constexpr MetricName kKafkaWaiting{
    "walrelay_kafka_waiting_seconds",
    "Seconds the events in flight have waited without any delivery report from Kafka; 0 "
    "while none waits or acknowledgements keep coming. From 5 s on, /readyz says the relay "
    "waits for Kafka (brokers down, or fewer in-sync replicas than min.insync.replicas)."};
inline constexpr MetricName kKafkaUnreached{
    "walrelay_kafka_unreached_seconds",
    "Seconds this session's producer has gone without any Kafka broker answering (wrong "
    "address, broker down, firewall, TLS/SASL mismatch); 0 once one answered. From 10 s on, "
    "/readyz says so and the log names the address."};
inline constexpr MetricName kOldestUnconfirmedEvent{
    "walrelay_oldest_unconfirmed_event_seconds",
    "Age (from its commit) of the oldest transaction read whose events are not all confirmed; "
    "0 when none waits. With walrelay_heartbeat_lag_seconds (WAL not read yet) it bounds "
    "how stale the topics are."};
inline constexpr MetricName kTableOldestPartitionAge{
    "walrelay_table_oldest_partition_seconds",
    "Age of the table's oldest partition (its lower bound); -1: not partitioned by time."};
inline constexpr MetricName kTableOldestRowAge{
    "walrelay_table_oldest_row_seconds",
    "Age of the table's oldest row by its timestamp column (the outbox's created_at); -1: empty, "
    "or no index leads with the column (not measured)."};
inline constexpr MetricName kSlotRecoveries{
    "walrelay_slot_recoveries_total",
    "Times the slot was found lost or missing and recreated, re-publishing from the outbox."};
inline constexpr MetricName kRecovering{
    "walrelay_recovering",
    "1 while a lost-slot recovery republishes from the outbox tables (nothing streams "
    "meanwhile), else 0."};
inline constexpr MetricName kRecoveryRowsRemaining{
    "walrelay_recovery_rows_remaining",
    "Rows the running recovery has still to republish (counted under its snapshot; updated "
    "every 10 s); 0 when none runs."};

// --- slot guard (SlotGuard) and `walrelay lag --prometheus`; label slot = slot name
// (`walrelay lag` adds plugin, database and slot_type).
inline constexpr MetricName kSlotRetainedBytes{
    "walrelay_slot_retained_bytes",
    "pg_current_wal_lsn() minus the slot's restart_lsn: WAL the slot keeps on disk."};
inline constexpr MetricName kSlotConfirmedLagBytes{
    "walrelay_slot_confirmed_lag_bytes",
    "pg_current_wal_lsn() minus the slot's confirmed_flush_lsn."};
inline constexpr MetricName kSlotSafeWalSize{
    "walrelay_slot_safe_wal_size_bytes",
    "Bytes of WAL that can still be written before the slot is invalidated; -1 when "
    "max_slot_wal_keep_size is unlimited."};
// Label status = reserved | extended | unreserved | lost; 1 for the current one.
inline constexpr MetricName kSlotWalStatus{"walrelay_slot_wal_status",
                                           "The slot's wal_status: 1 for the current value."};
// Label state = ok | warn | critical | lost | missing; 1 for the current one.
inline constexpr MetricName kSlotState{
    "walrelay_slot_state", "Slot guard state against the thresholds: 1 for the current state."};
inline constexpr MetricName kSlotActive{"walrelay_slot_active",
                                        "1 if a connection is reading the slot, else 0."};
// `walrelay lag --prometheus`, PostgreSQL 17+: label failover = no | yes | synced |
// synced-temporary (as lag's FAILOVER column); 1 for the current one.
inline constexpr MetricName kSlotFailover{
    "walrelay_slot_failover",
    "The slot's failover role (PostgreSQL 17+): no, yes (a failover slot), synced (a "
    "standby's copy that a promotion keeps) or synced-temporary; 1 for the current one."};
inline constexpr MetricName kSlotWarnThreshold{
    "walrelay_slot_warn_threshold_bytes",
    "Warn threshold on retained bytes (resolved); -1 when none applies."};
inline constexpr MetricName kSlotCriticalThreshold{
    "walrelay_slot_critical_threshold_bytes",
    "Critical threshold on retained bytes (resolved); -1 when none applies."};
inline constexpr MetricName kMaxSlotWalKeepSize{
    "walrelay_server_max_slot_wal_keep_size_bytes",
    "The server's max_slot_wal_keep_size in bytes; -1 = unlimited (disk-fill risk)."};
inline constexpr MetricName kSlotGuardPolls{"walrelay_slot_guard_polls_total",
                                            "Slot guard polls attempted."};
inline constexpr MetricName kSlotGuardErrors{"walrelay_slot_guard_errors_total",
                                             "Slot guard polls that failed (connection or query)."};
inline constexpr MetricName kSlotGuardLastPoll{"walrelay_slot_guard_last_success_timestamp_seconds",
                                               "Unix time of the last successful slot guard poll."};
// `walrelay lag --prometheus` only: the check's exit code.
inline constexpr MetricName kLagCheckStatus{
    "walrelay_lag_check_status",
    "Result of `walrelay lag` (its exit code): 0 ok, 1 warn, 2 critical, 3 cannot connect."};

}  // namespace walrelay::relay::metric_names
