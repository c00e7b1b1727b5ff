#include "src/relay/relay.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <random>
#include <thread>

#include "slot/replication_connection.h"
#include "slot/slot_admin.h"
#include "slot/wire.h"
#include "src/kafka/mock_cluster.h"
#include "src/relay/dead_letter.h"
#include "src/relay/pipeline.h"

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
    case StatusCode::kInternal:            // fatal producer error: a new producer fixes it
    case StatusCode::kNotFound:            // e.g. a topic not created yet: loud, retried
    case StatusCode::kFailedPrecondition:  // e.g. the slot is active for another reader
      return true;
    default:
      return false;
  }
}

std::string ConninfoWithPassword(const RelayConfig& config) {
  std::string conninfo = config.source_dsn;
  if (!config.source_password.empty()) {
    conninfo += " password='";
    for (char ch : config.source_password) {
      if (ch == '\'' || ch == '\\') conninfo += '\\';
      conninfo += ch;
    }
    conninfo += "'";
  }
  return conninfo;
}

}  // namespace

// One streaming session: connections, producer and pipeline live and die together.
class Relay::Session {
 public:
  explicit Session(Relay& relay) : relay_(relay), config_(relay.config_), stats_(relay.stats_) {}
  ~Session() {
    pipeline_.reset();
    sink_.reset();  // purges: stale reports must not outlive the pipeline
    stats_.streaming.store(0);
    stats_.in_flight_events.store(0);
    stats_.in_flight_bytes.store(0);
  }

  Status Start();
  Status Stream() { return pipeline_->Run(relay_.stop_); }

 private:
  Status Heartbeat();

  Relay& relay_;
  const RelayConfig& config_;
  RelayStats& stats_;
  std::unique_ptr<slot::SlotAdmin> admin_;
  std::unique_ptr<slot::ReplicationConnection> conn_;
  std::unique_ptr<KafkaSink> sink_;
  std::unique_ptr<DeadLetterWriter> dead_letters_;
  std::unique_ptr<Pipeline> pipeline_;
  Clock::time_point next_heartbeat_ = Clock::now();
};

Status Relay::Session::Start() {
  const std::string conninfo = ConninfoWithPassword(config_);
  // Server checks and objects, over a normal connection.
  WALRELAY_ASSIGN_OR_RETURN(admin_, slot::SlotAdmin::Connect(conninfo));
  WALRELAY_ASSIGN_OR_RETURN(slot::ServerSettings settings, admin_->GetServerSettings());
  if (settings.wal_level != "logical") {
    return FailedPreconditionError("wal_level is '" + settings.wal_level +
                                   "': set wal_level = logical in postgresql.conf and restart "
                                   "PostgreSQL");
  }
  const milliseconds status_interval =
      std::min(config_.status_interval, slot::StatusInterval(settings.wal_sender_timeout));
  if (config_.create_slot && !config_.tables.empty()) {
    WALRELAY_RETURN_IF_ERROR(admin_->EnsurePublication(config_.publication, config_.tables));
  }
  WALRELAY_ASSIGN_OR_RETURN(dead_letters_, DeadLetterWriter::Open(conninfo, config_.dead_letter_table,
                                                                   config_.slot));

  // The replication connection.
  std::string repl = conninfo + " replication=database";
  WALRELAY_ASSIGN_OR_RETURN(conn_, slot::ReplicationConnection::Connect(repl));
  auto existing = admin_->GetSlot(config_.slot);
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
  WALRELAY_ASSIGN_OR_RETURN(sink_, KafkaSink::Create(std::move(popts)));

  Pipeline::Options pipeline_options;
  pipeline_options.status_interval = status_interval;
  if (config_.heartbeat_interval.count() > 0) {
    pipeline_options.tick = [this] { return Heartbeat(); };
  }
  pipeline_ = std::make_unique<Pipeline>(config_, stats_, *conn_, *sink_, *dead_letters_,
                                         std::move(pipeline_options));

  std::vector<std::pair<std::string, std::string>> options = {
      {"proto_version", "1"},
      {"publication_names", config_.publication},
      {"messages", "true"},
  };
  WALRELAY_RETURN_IF_ERROR(conn_->StartLogical(config_.slot, Lsn(0), options));
  stats_.streaming.store(1);
  spdlog::info("streaming slot {} (publication {}), status every {} ms", config_.slot,
               config_.publication, status_interval.count());
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
  Status st = admin_->EmitMessage(/*transactional=*/false, kHeartbeatPrefix,
                                  std::to_string(now_us));
  if (!st.ok()) return st.WithContext("heartbeat");
  return Status::Ok();
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
