#include "src/relay/run/relay.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>
#include <random>
#include <thread>

#include "src/kafka/mock_cluster.h"
#include "src/relay/polling/poller.h"
#include "src/relay/run/observability.h"
#include "src/relay/run/session.h"
#include "src/relay/run/startup_checks.h"

namespace walrelay::relay {

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
    case StatusCode::kInternal:            // fatal producer error: a new producer fixes it
    case StatusCode::kNotFound:            // e.g. a topic not created yet: loud, retried
    case StatusCode::kFailedPrecondition:  // e.g. the slot is active for another reader
    case StatusCode::kCancelled:           // purged records: purges happen only to restart
      return true;
    default:
      return false;
  }
}

}  // namespace

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
  popts.transport_errors = &stats_.kafka_transport_errors;
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
    LogProgress();
    if (handled != 0) continue;
    for (auto until = Clock::now() + config_.poll_interval; Clock::now() < until && !stop_.load();) {
      std::this_thread::sleep_for(milliseconds(std::min<int64_t>(20, config_.poll_interval.count())));
      stats_.loop_ticks.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return Status::Ok();
}

void Relay::LogProgress() {
  if (auto line = progress_report_.Due(stats_, ProgressReport::Clock::now())) {
    spdlog::info("{}", *line);
  }
}

std::string Relay::bootstrap_servers() const {
  if (embedded_) return embedded_->cluster->bootstraps();
  return config_.bootstrap_servers;
}

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
  // A statement waiting for the server (a slot's creation behind open transactions, a
  // recovery's scans of a large outbox) keeps the watchdog fed and says what it waits for:
  // in STATUS and /readyz at once, in the log every 10 s.
  slot::ScopedServerWaitObserver server_waits(
      [this, last_logged = std::chrono::milliseconds(0)](
          std::string_view what, milliseconds waited, bool ended) mutable {
        stats_.loop_ticks.fetch_add(1, std::memory_order_relaxed);
        const int64_t s = waited.count() / 1000;
        if (ended) {
          stats_.SetServerWait("");
          if (last_logged.count() > 0) {
            spdlog::info("the server answered after {} s: {}", s, what);
          }
          last_logged = milliseconds(0);
          return;
        }
        stats_.SetServerWait(std::string(what) + " (waiting for the server for " +
                             std::to_string(s) + " s)");
        if (waited - last_logged >= std::chrono::seconds(10)) {
          last_logged = waited;
          spdlog::info("still waiting for the server after {} s: {}{}", s, what,
                       what.starts_with("CREATE_REPLICATION_SLOT")
                           ? " (a new slot waits for every transaction open on the server to "
                             "end: see pg_stat_activity WHERE backend_xid IS NOT NULL)"
                           : "");
        }
      });
  std::mt19937_64 rng(std::random_device{}());
  milliseconds backoff = config_.reconnect_min;
  bool checked = false;
  bool yielded = false;  // the last session let go of the slot (Session::yielded)
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
        if (st.ok() && config_.exactly_once) {
          st = CheckCheckpointTopic(ProducerOptions().properties, config_.checkpoint_topic,
                                    std::chrono::seconds(30));
        }
        if (st.ok()) checked = true;
        if (!st.ok() && st.code() != StatusCode::kUnavailable) {
          result = st;  // said once, by the caller (walrelay's "stopped (exit N)" line)
          break;
        }
      }
      std::optional<int> standby_for;
      std::string standby_holder;
      yielded = false;
      if (st.ok()) {
        Session session(*this);
        st = session.Start();
        standby_for = session.standby_for();
        standby_holder = session.standby_holder();
        if (st.ok()) {
          const auto streaming_since = Clock::now();
          st = session.Stream();
          if (st.ok()) break;  // stopped on request
          yielded = session.yielded();
          if (session.fenced()) {
            // Exactly-once mode: another relay initialised the stream's transactional.id
            // (it took the slot over while this one was paused or cut off). Nothing this
            // one had not committed is visible, and it confirmed nothing past its commits:
            // stand by, as for a slot held by another process.
            spdlog::warn("exactly-once: this relay was fenced by another relay of the same "
                         "stream: {}. Nothing of its open Kafka transaction is visible and "
                         "nothing past its last commit was confirmed; standing by",
                         st.message());
            standby_for = 0;
            standby_holder = "another relay (it fenced this one's Kafka producer)";
            stats_.kafka_fenced.fetch_add(1, std::memory_order_relaxed);
            stats_.fenced.store(1, std::memory_order_relaxed);
          }
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
        // Said before it is shown (/readyz, the gauge, stats): whoever sees the state can
        // read why in the log (RelayTest.SecondRelayStandsBy... read the log first and
        // found nothing, under ThreadSanitizer's slowness).
        if (stats_.standby.load() == 0 || stats_.standby_for.load() != *standby_for) {
          spdlog::warn(
              "standing by: replication slot {} is held by {} (another walrelay streaming, "
              "starting or recovering it, or another client); retrying every {} ms and taking "
              "over when it stops. /readyz says standby meanwhile",
              config_.slot, standby_holder, config_.standby_interval.count());
        }
        stats_.standby_for.store(*standby_for);
        stats_.standby.store(1);
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
      result = st;  // said once, by the caller
      break;
    }
    stats_.restarts.fetch_add(1);
    stats_.SetLastSessionError(st.ToString());
    milliseconds delay(
        std::uniform_int_distribution<int64_t>(backoff.count() / 2, backoff.count())(rng));
    if (yielded) {
      // Kafka unreachable from here (flow.kafka_wait_yield_ms): the slot is free; a standby
      // tries it at least once per 1.2 standby intervals, so three leave it the first try.
      stats_.kafka_wait_yields.fetch_add(1, std::memory_order_relaxed);
      delay = 3 * config_.standby_interval;
      spdlog::warn("{}; the slot is free for {} ms (three standby intervals), then this relay "
                   "tries it again (and stands by if another relay took it)",
                   st.message(), delay.count());
    } else {
      spdlog::warn("{} failed: {}; {} in {} ms", poll ? "poll session" : "session",
                   st.ToString(),
                   poll ? "rolled back (its rows stay unpublished and are published again: "
                          "consumers may see duplicates, nothing is lost); restarting"
                        : "restarting from the slot's confirmed position",
                   delay.count());
    }
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
