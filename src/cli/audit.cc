#include "src/cli/audit.h"

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "src/audit/audit.h"
#include "src/audit/metric_names.h"
#include "src/metrics/http_server.h"
#include "src/metrics/registry.h"

namespace walrelay::cli {
namespace {

namespace amn = audit::metric_names;

std::atomic<bool> g_audit_stop{false};
extern "C" void OnAuditSignal(int) { g_audit_stop.store(true); }

// The sidecar's gauges: the last completed run's findings.
struct AuditMetrics {
  explicit AuditMetrics(metrics::Registry* r)
      : missing(r->AddGauge(amn::kMissing,
                            "Rows committed in the last audit's window that are neither in Kafka "
                            "nor dead-lettered (lost, unless the relay is still behind)")),
        phantom(r->AddGauge(amn::kPhantom,
                            "Records naming an outbox table whose event id no row has")),
        out_of_order(r->AddGauge(amn::kOutOfOrder,
                                 "First deliveries below their key's previous source position")),
        torn(r->AddGauge(amn::kTorn,
                         "Source transactions of the window partly in Kafka")),
        duplicates(r->AddGauge(amn::kDuplicated,
                               "Events of the window in more than one record")),
        beyond_inbox(r->AddGauge(amn::kDuplicatedBeyondInbox,
                                 "Duplicated events whose copies were produced further apart than "
                                 "--inbox-retention (0 when not given)")),
        late(r->AddGauge(amn::kLate,
                         "First deliveries produced more than --late after commit")),
        rows(r->AddGauge(amn::kWindowRows, "Outbox rows in the last audit's window")),
        window(r->AddGauge(amn::kWindowSeconds,
                           "Length of the window the last audit covered")),
        last_run(r->AddGauge(amn::kLastRun,
                             "When the last audit completed (Unix time)")),
        runs(r->AddCounter(amn::kRuns, "Audits completed")),
        failures(r->AddCounter(amn::kFailures,
                               "Audits that could not complete (database or Kafka unreachable)")) {}
  void Record(const audit::AuditReport& report) {
    missing.Set(static_cast<double>(report.missing.count));
    phantom.Set(static_cast<double>(report.phantom.count));
    out_of_order.Set(static_cast<double>(report.out_of_order.count));
    torn.Set(static_cast<double>(report.torn.count));
    duplicates.Set(static_cast<double>(report.duplicated.count));
    beyond_inbox.Set(static_cast<double>(report.duplicated_beyond_inbox.count));
    late.Set(static_cast<double>(report.late.count));
    rows.Set(static_cast<double>(report.reference_rows));
    window.Set(static_cast<double>(report.window_end_us - report.window_start_us) / 1e6);
    last_run.Set(static_cast<double>(std::chrono::duration_cast<std::chrono::seconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count()));
    runs.Inc();
  }
  metrics::Gauge &missing, &phantom, &out_of_order, &torn, &duplicates, &beyond_inbox, &late, &rows, &window,
      &last_run;
  metrics::Counter &runs, &failures;
};

}  // namespace

long long ParseDurationSeconds(const std::string& text) {
  if (text.empty()) return -1;
  char* end = nullptr;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || n < 0) return -1;
  const std::string unit(end);
  if (unit.empty() || unit == "s") return n;
  if (unit == "m") return n * 60;
  if (unit == "h") return n * 3600;
  if (unit == "d") return n * 86400;
  return -1;
}

AuditCommand::AuditCommand(CLI::App* parent) {
  app_ = parent->add_subcommand(
      "audit",
      "Read the published topics back and reconcile them with the outbox tables, "
      "independently of the relay: every row committed in the window must be in Kafka (or "
      "in the dead-letter table), no record may name a row that never committed, first "
      "deliveries keep each key's commit order, no source transaction is partly there. "
      "Exit 0 clean, 1 findings, 2 bad options, 3 cannot reach the database or Kafka.");
  app_->add_option("--source-dsn", dsn_, "libpq conninfo of the source database (a plain connection)")
      ->envname("WALRELAY_SOURCE_DSN");
  app_->add_option("--kafka-bootstrap-servers", bootstrap_, "Kafka brokers")
      ->envname("WALRELAY_KAFKA_BOOTSTRAP_SERVERS");
  app_->add_option("--kafka-property", properties_,
                   "librdkafka property NAME=VALUE for the audit's consumer (security, ...; "
                   "repeatable)");
  app_->add_option("--topic", topics_, "A topic the outbox publishes to (repeatable; required)")
      ->required();
  app_->add_option("--source-table", tables_, "Outbox table (repeatable)")->capture_default_str();
  app_->add_option("--since", since_, "The window's start, back from now: 90s, 30m, 2h, 1d")
      ->capture_default_str();
  app_->add_option("--grace", grace_,
                   "Leave out rows created this recently (the relay may still be publishing them)")
      ->capture_default_str();
  app_->add_option("--late", late_, "Report first deliveries produced this long after commit")
      ->capture_default_str();
  app_->add_option("--janitor-retention", janitor_,
                   "The janitor's retention (outbox.retention_ms) when it deletes rows: a "
                   "--since beyond it is refused (deleted rows would look like phantoms). 0: "
                   "no janitor")
      ->capture_default_str();
  app_->add_option("--inbox-retention", inbox_,
                   "The consumers' inbox retention (inbox.retention): a duplicate whose copies "
                   "were produced further apart is a finding (exit 1), as the inbox would apply "
                   "it twice. 0: not checked")
      ->capture_default_str();
  app_->add_option("--dead-letter-table", dead_letter_table_, "walrelay's dead-letter table")
      ->capture_default_str();
  app_->add_option("--event-id-column", event_id_column_)->capture_default_str();
  app_->add_option("--aggregate-id-column", aggregate_id_column_)->capture_default_str();
  app_->add_option("--created-at-column", created_at_column_)->capture_default_str();
  app_->add_option("--event-id-header", event_id_header_, "The records' event id header")
      ->capture_default_str();
  app_->add_flag("--read-uncommitted", read_uncommitted_,
                 "Read records of open and aborted transactions too (default: read_committed, "
                 "what consumers of exactly-once mode read)");
  app_->add_option("--samples", samples_, "Event ids shown per finding")->capture_default_str();
  app_->add_flag("--json", json_, "One JSON object instead of the summary");
  app_->add_option("--every", every_,
                   "Run as a sidecar: an audit every DURATION (e.g. 10m) until SIGTERM, its "
                   "findings as walrelay_audit_* gauges on --metrics-address. 0: once")
      ->capture_default_str();
  app_->add_option("--metrics-address", metrics_address_,
                   "host:port of /metrics, /healthz and /readyz in sidecar mode")
      ->capture_default_str();
}

bool AuditCommand::parsed() const { return app_->parsed(); }

int AuditCommand::Run() const {
  audit::AuditOptions o;
  o.source_dsn = dsn_;
  o.tables = tables_;
  o.topics = topics_;
  o.dead_letter_table = dead_letter_table_;
  o.event_id_column = event_id_column_;
  o.aggregate_id_column = aggregate_id_column_;
  o.created_at_column = created_at_column_;
  o.event_id_header = event_id_header_;
  o.read_committed = !read_uncommitted_;
  o.samples = samples_;
  if (!bootstrap_.empty()) o.kafka_properties["bootstrap.servers"] = bootstrap_;
  for (const std::string& p : properties_) {
    const auto eq = p.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "walrelay audit: --kafka-property " << p << " is not NAME=VALUE\n";
      return kAuditExitUsage;
    }
    o.kafka_properties[p.substr(0, eq)] = p.substr(eq + 1);
  }
  if (o.kafka_properties.count("bootstrap.servers") == 0) {
    std::cerr << "walrelay audit: no Kafka to read (--kafka-bootstrap-servers)\n";
    return kAuditExitUsage;
  }
  struct {
    const char* flag;
    const std::string& text;
    long long seconds;
  } durations[] = {{"--since", since_, 0}, {"--grace", grace_, 0}, {"--late", late_, 0},
                   {"--janitor-retention", janitor_, 0}, {"--inbox-retention", inbox_, 0}};
  for (auto& d : durations) {
    d.seconds = ParseDurationSeconds(d.text);
    if (d.seconds < 0) {
      std::cerr << "walrelay audit: " << d.flag << " " << d.text
                << " is not a duration (e.g. 90s, 30m, 2h, 1d)\n";
      return kAuditExitUsage;
    }
  }
  o.since = std::chrono::seconds(durations[0].seconds);
  o.grace = std::chrono::seconds(durations[1].seconds);
  o.late = std::chrono::seconds(durations[2].seconds);
  o.janitor_retention = std::chrono::seconds(durations[3].seconds);
  o.inbox_retention = std::chrono::seconds(durations[4].seconds);
  const long long every = ParseDurationSeconds(every_);
  if (every < 0) {
    std::cerr << "walrelay audit: --every " << every_ << " is not a duration (e.g. 10m)\n";
    return kAuditExitUsage;
  }
  if (every > 0) {
    // Sidecar: one audit every `every` seconds, the last one's findings on /metrics.
    metrics::Registry registry;
    AuditMetrics m(&registry);
    std::atomic<bool> last_ok{false};
    metrics::ServerOptions so;
    so.address = metrics_address_;
    so.ready = [&last_ok]() -> Status {
      return last_ok.load() ? Status::Ok()
                            : UnavailableError("the last audit did not complete (see the log)");
    };
    auto server = metrics::MetricsServer::Start(&registry, so);
    if (!server.ok()) {
      std::cerr << "walrelay audit: metrics server: " << server.status().message() << "\n";
      return kAuditExitUsage;
    }
    std::signal(SIGINT, OnAuditSignal);
    std::signal(SIGTERM, OnAuditSignal);
    std::cerr << "walrelay audit: an audit every " << every << " s; metrics on http://"
              << (*server)->host() << ":" << (*server)->port() << "/metrics\n";
    while (!g_audit_stop.load()) {
      auto report = audit::RunAudit(o);
      if (report.ok()) {
        m.Record(*report);
        last_ok.store(true);
        std::cerr << audit::FormatReport(*report, o);
      } else {
        m.failures.Inc();
        last_ok.store(false);
        std::cerr << "walrelay audit: this run failed (findings not updated; next run in " << every
                  << " s): " << report.status().message() << "\n";
      }
      for (long long i = 0; i < every * 10 && !g_audit_stop.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    return kAuditExitClean;
  }
  if (!json_) {
    o.progress = [](uint64_t records, size_t done, size_t partitions) {
      std::cerr << "walrelay audit: " << records << " records read, " << done << " of "
                << partitions << " partitions to their end\n";
    };
  }
  auto report = audit::RunAudit(o);
  if (!report.ok()) {
    std::cerr << "walrelay audit: " << report.status().message() << "\n";
    const auto code = report.status().code();
    return code == StatusCode::kInvalidArgument || code == StatusCode::kFailedPrecondition ||
                   code == StatusCode::kNotFound
               ? kAuditExitUsage
               : kAuditExitUnreachable;
  }
  std::cout << (json_ ? audit::FormatReportJson(*report) + "\n" : audit::FormatReport(*report, o));
  return report->clean() ? kAuditExitClean : kAuditExitFindings;
}

}  // namespace walrelay::cli
