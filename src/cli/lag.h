// `walrelay lag`: an operator's view of every replication slot of a cluster (not only
// walrelay's), and a monitoring check.
//
// Over a NORMAL connection (no replication privilege needed; any role that may read
// pg_replication_slots and pg_settings) it lists, per slot: name, plugin, slot type,
// database, active and active_pid, retained WAL (current − restart_lsn) and confirmed
// lag (current − confirmed_flush_lsn) in human units, wal_status, safe_wal_size, and the
// state from relay::EvaluateSlot (ok / warn / critical / lost).
//
// "inactive since": when the slot's reader last released it, from PostgreSQL 17's
// inactive_since (UTC; "-" and JSON null while active); servers before 17 do not record
// it, so the column says "n/a" (JSON null) there and nothing is derived.
//
// --tables NAME,...: also the health of those tables (relay/table_health.h: live and dead
// rows, size, vacuum and analyze ages, invalid indexes, partitions), as a second table,
// a "tables" array in JSON and the walrelay_table_* gauges in Prometheus form; a table
// that does not exist is named (missing_tables) and changes no exit code.
//
// Output: a table (default), --json (one JSON document per refresh, on one line), or
// --prometheus (one exposition for node_exporter's textfile collector).
// --watch SECONDS repeats until SIGINT/SIGTERM (and then exits with the last code).
//
// Exit codes (Nagios-style, so it works as a monitoring check):
//   0 every slot ok            1 some slot at warn
//   2 some slot critical, lost, or a --slot that does not exist
//   3 cannot connect or query (or a bad command line)
// Thresholds: --warn/--critical take bytes with a unit (512MB, 1GB; 1024-based) or a
// fraction of max_slot_wal_keep_size (0.5, 80%); a fraction does not apply when
// max_slot_wal_keep_size = -1. Without thresholds only lost/unreserved slots fail.
// Connection: --dsn, else $WALRELAY_SOURCE_DSN, else libpq's PG* environment variables.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace walrelay::cli {

inline constexpr int kLagExitOk = 0;
inline constexpr int kLagExitWarn = 1;
inline constexpr int kLagExitCritical = 2;
inline constexpr int kLagExitUnknown = 3;

// Registers the `lag` subcommand on `parent`. Lifetime: must outlive the parse and Run().
class LagCommand {
 public:
  explicit LagCommand(CLI::App* parent);

  // Whether `lag` was on the command line.
  bool parsed() const;
  // REQUIRES: parsed(). Returns the process exit code.
  int Run() const;

 private:
  CLI::App* app_;
  std::string dsn_;
  std::string password_file_;
  double watch_seconds_ = 0;
  bool json_ = false;
  bool prometheus_ = false;
  std::string warn_;
  std::string critical_;
  std::vector<std::string> slots_;
  std::vector<std::string> tables_;
  std::string progress_table_ = "walrelay_progress";
  mutable bool progress_warned_ = false;
};

}  // namespace walrelay::cli
