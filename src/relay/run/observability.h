// Relay::Observability (internal to run/): what `walrelay run` shows and runs beside its
// sessions, one set per process: the metrics registry and /metrics, /healthz, /readyz,
// and the side tasks that feed them (the slot guard, the outbox janitor, table health).
// observability.cc builds it (Relay::StartObservability); sessions start the side tasks
// once the slot exists, Run() stops them.
#pragma once

#include <memory>
#include <string_view>

#include "src/metrics/http_server.h"
#include "src/metrics/registry.h"
#include "src/relay/lifecycle/janitor.h"
#include "src/relay/lifecycle/slot_guard.h"
#include "src/relay/lifecycle/table_health.h"
#include "src/relay/run/relay.h"

namespace walrelay::relay {

// Metrics, the slot guard and the HTTP endpoint: one set for the process, across sessions.
struct Relay::Observability {
  metrics::Registry registry;
  metrics::Histogram* produce_latency = nullptr;
  metrics::Histogram* commit_to_ack_latency = nullptr;
  metrics::Histogram* transaction_records = nullptr;         // exactly-once mode only
  metrics::Histogram* transaction_commit_latency = nullptr;  // exactly-once mode only
  metrics::Histogram* rows_per_poll = nullptr;  // poll mode only
  std::unique_ptr<SlotGuard> guard;
  std::unique_ptr<OutboxJanitor> janitor;  // null when outbox.retention_ms is 0
  std::unique_ptr<TableHealthMonitor> table_health;
  std::unique_ptr<metrics::MetricsServer> server;
};

// Said at start and on /readyz while kafka.embedded is on.
inline constexpr std::string_view kEmbeddedKafkaWarning =
    "kafka.embedded is on: records live only in this process's memory and are lost when it "
    "exits, while the slot is confirmed past them; for development only, use "
    "--kafka-bootstrap-servers for anything that matters";

}  // namespace walrelay::relay
