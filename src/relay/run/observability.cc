#include "src/relay/run/observability.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "src/metrics/process_metrics.h"
#include "src/relay/core/metric_names.h"
#include "src/relay/core/pipeline.h"

namespace walrelay::relay {
namespace {

// Seconds since `since_us` (Unix µs), 0 when it is 0.
double SecondsSince(const std::atomic<int64_t>& since_us) {
  const int64_t since = since_us.load(std::memory_order_relaxed);
  if (since == 0) return 0;
  const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  return std::max<int64_t>(0, now_us - since) / 1e6;
}

}  // namespace

Status Relay::StartObservability() {
  namespace mn = metric_names;
  obs_ = std::make_unique<Observability>();
  // Between two attempts of a failing topic: the session's reconnect backoff, twice, and
  // a topic check or metadata wait (~31 s for a missing topic).
  topic_errors_ = std::make_unique<TopicErrors>(
      config_.kafka_topic_error_timeout, 2 * config_.reconnect_max + std::chrono::seconds(60));
  metrics::Registry& r = obs_->registry;
  metrics::AddProcessMetrics(r);  // process_* and the C heap (is a growing RSS a leak?)
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
  counter(mn::kKafkaWaitYields, stats_.kafka_wait_yields);
  counter(mn::kKafkaTransportErrors, stats_.kafka_transport_errors);
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
  r.AddGaugeCallback(mn::kKafkaWaiting.name, mn::kKafkaWaiting.help, {}, [this] {
    return SecondsSince(stats_.kafka_waiting_since_us);
  });
  r.AddGaugeCallback(mn::kKafkaUnreached.name, mn::kKafkaUnreached.help, {}, [this] {
    return SecondsSince(stats_.kafka_unreached_since_us);
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
  if (config_.exactly_once) {
    counter(mn::kEventsSkipped, stats_.skipped_already_published, {{"kind", "already_published"}});
    counter(mn::kKafkaTransactionsCommitted, stats_.kafka_transactions_committed);
    counter(mn::kKafkaTransactionsAborted, stats_.kafka_transactions_aborted);
    counter(mn::kKafkaFenced, stats_.kafka_fenced);
    gauge(mn::kKafkaFencedNow, stats_.fenced);
    obs_->transaction_records =
        &r.AddHistogram(mn::kKafkaTransactionRecords.name, mn::kKafkaTransactionRecords.help,
                        {1, 10, 100, 1000, 10000, 100000, 1000000});
    obs_->transaction_commit_latency =
        &r.AddHistogram(mn::kKafkaTransactionCommitLatency.name,
                        mn::kKafkaTransactionCommitLatency.help, metrics::DefaultLatencyBuckets());
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
      if (const double unreached = SecondsSince(stats_.kafka_unreached_since_us);
          unreached >= static_cast<double>(kKafkaUnreachedIsNews.count())) {
        return UnavailableError(
            "no Kafka broker at " +
            (config_.bootstrap_servers.empty() ? std::string("the embedded dev broker")
                                               : config_.bootstrap_servers) +
            " has answered for " + std::to_string(static_cast<int64_t>(unreached)) +
            " s (refused, unknown host, firewall or TLS/SASL mismatch: see the log); events "
            "wait in the slot, nothing is lost, nothing is confirmed past them. Fix: check "
            "kafka.bootstrap_servers and that a broker listens there");
      }
      if (config_.source_mode == SourceMode::kPoll) {
        if (stats_.polling.load() == 0) {
          return UnavailableError("no poll session runs (starting, or restarting after a "
                                  "failure; sessions restarted so far: " +
                                  std::to_string(stats_.restarts.load()) +
                                  ", the log says why)");
        }
        return Status::Ok();
      }
      // Fenced is said from the moment the session ends on it, not only once the relay
      // stands by: the fenced producer's teardown comes between, and on librdkafka 2.8.0 it
      // took long enough for /readyz to say "connecting" meanwhile (ApacheKafkaTest.
      // ExactlyOnceZombieIsFencedAndPublishesNothing). Cleared when this relay streams.
      if (stats_.fenced.load() != 0) {
        return UnavailableError(
            "standby: fenced (exactly-once): another relay of stream " + config_.slot +
            " initialised its Kafka producer with the same transactional.id (it took the slot "
            "over while this one was paused or cut off); nothing this relay had not committed "
            "is visible, nothing past its commits was confirmed. It takes over again when the "
            "other one stops");
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
      if (stats_.streaming.load() == 0) {
        if (std::string wait = stats_.ServerWait(); !wait.empty()) {
          return UnavailableError("no session streams yet: " + wait);
        }
        if (std::string last = stats_.LastSessionError(); !last.empty()) {
          return UnavailableError("no session streams: reconnecting (sessions restarted so far: " +
                                  std::to_string(stats_.restarts.load()) +
                                  "); the last one ended with: " + last);
        }
        return UnavailableError("no session streams (connecting; the log says what it waits for)");
      }
      if (const double waited = SecondsSince(stats_.kafka_waiting_since_us);
          waited >= static_cast<double>(kKafkaWaitIsNews.count())) {
        return UnavailableError(
            "waiting for Kafka: the oldest unconfirmed transaction's events have had no "
            "acknowledgement for " + std::to_string(static_cast<int64_t>(waited)) + " s (" +
            std::to_string(stats_.in_flight_events.load()) +
            " events in flight in all; brokers down or unreachable from here, or fewer in-sync "
            "replicas than the topic's min.insync.replicas); nothing is lost, nothing past them "
            "is confirmed, and they are delivered once Kafka acknowledges");
      }
      const SlotState state = obs_->guard->state();
      if (SlotStateSeverity(state) >= 2) {
        return UnavailableError("slot " + config_.slot + " is " +
                                std::string(SlotStateName(state)));
      }
      return Status::Ok();
    };
    so.standing_by = [this] { return stats_.standby.load() != 0; };
    if (config_.embedded_kafka) so.note = [] { return std::string(kEmbeddedKafkaWarning); };
    WALRELAY_ASSIGN_OR_RETURN(obs_->server, metrics::MetricsServer::Start(&r, so));
    // ":9187" and "0.0.0.0:9187" listen on every interface: say so, with a URL that works
    // here, instead of "http://:9187"; port 0 shows the port the kernel chose.
    const std::string& address = config_.metrics_address;
    const size_t colon = address.rfind(':');
    std::string host = colon == std::string::npos ? address : address.substr(0, colon);
    const bool any = host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::";
    if (any) host = "localhost";
    spdlog::info("metrics on http://{}:{}/metrics (also /healthz, /readyz){}", host,
                 obs_->server->port(), any ? ", listening on every interface" : "");
  }
  return Status::Ok();
}

std::string Relay::RenderMetrics() const { return obs_ ? obs_->registry.Render() : ""; }

int Relay::metrics_port() const { return obs_ && obs_->server ? obs_->server->port() : 0; }

}  // namespace walrelay::relay
