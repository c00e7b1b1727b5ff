// `walrelay audit`: reads the published topics back and reconciles them with the outbox
// tables (src/audit/audit.h says what it compares and what each finding means).
//
// --every DURATION makes it a sidecar: an audit every DURATION until SIGINT/SIGTERM, the
// last run's findings as Prometheus gauges on --metrics-address (walrelay_audit_*), /readyz
// ready while the last run completed. A run that fails (database or Kafka unreachable) is
// counted and logged, and the next one is tried.
//
// Exit codes: 0 clean (duplicates and late deliveries are reported, not failures), 1
// findings (missing, phantom, out of order, torn), 2 bad options or a window the janitor's
// retention makes unsound, 3 cannot reach the database or Kafka.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace walrelay::cli {

inline constexpr int kAuditExitClean = 0;
inline constexpr int kAuditExitFindings = 1;
inline constexpr int kAuditExitUsage = 2;
inline constexpr int kAuditExitUnreachable = 3;

// Parses "90s", "5m", "2h", "7d" (or plain seconds); -1 when malformed.
long long ParseDurationSeconds(const std::string& text);

// Registers the `audit` subcommand on `parent`. Lifetime: must outlive the parse and Run().
class AuditCommand {
 public:
  explicit AuditCommand(CLI::App* parent);
  bool parsed() const;
  // REQUIRES: parsed(). Returns the process exit code.
  int Run() const;

 private:
  CLI::App* app_;
  std::string dsn_, bootstrap_, since_ = "1h", grace_ = "5m", late_ = "60s", janitor_ = "0", inbox_ = "0";
  std::string every_ = "0", metrics_address_ = "127.0.0.1:9466";
  std::string dead_letter_table_ = "walrelay_dead_letter";
  std::string event_id_column_ = "event_id", aggregate_id_column_ = "aggregate_id",
              created_at_column_ = "created_at", event_id_header_ = "event_id";
  std::vector<std::string> tables_ = {"outbox"}, topics_, properties_;
  bool json_ = false, read_uncommitted_ = false;
  size_t samples_ = 10;
};

}  // namespace walrelay::cli
