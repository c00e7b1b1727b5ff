#include "src/cli/audit.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "src/audit/audit.h"

namespace walrelay::cli {

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
                   {"--janitor-retention", janitor_, 0}};
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
