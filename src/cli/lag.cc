#include "src/cli/lag.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "base/json.h"
#include "base/sql.h"
#include "slot/slot_admin.h"
#include "slot/pg_error.h"
#include "slot/server_version.h"
#include "src/cli/options.h"
#include "src/metrics/registry.h"
#include "src/relay/core/metric_names.h"
#include "src/relay/lifecycle/slot_guard.h"
#include "src/relay/lifecycle/table_health.h"

namespace walrelay::cli {
namespace {

namespace mn = relay::metric_names;
using relay::SlotEvaluation;
using relay::SlotState;
using relay::Threshold;

std::atomic<bool> g_lag_stop{false};
extern "C" void OnLagSignal(int) { g_lag_stop.store(true); }

struct Row {
  std::string name;  // the slot (for a missing --slot: the requested name)
  std::optional<slot::SlotInfo> info;
  bool walrelay = false;  // named in walrelay's progress table
  SlotEvaluation eval;
};

struct Snapshot {
  slot::ServerSettings settings;
  Lsn current;
  std::vector<Row> rows;
  std::optional<uint64_t> warn_bytes;
  std::optional<uint64_t> critical_bytes;
  int exit_code = kLagExitOk;
  // --tables: the health of the outbox, inbox and dead-letter tables asked for.
  std::vector<relay::TableHealthRow> tables;
  std::vector<std::string> missing_tables;  // asked for, not found
};

// walrelay's slots: those its progress table names, with the seconds since walrelay last
// recorded progress for each. Empty when the table does not exist.
using WalrelaySlots = std::map<std::string, int64_t>;
Result<WalrelaySlots> ReadWalrelaySlots(PGconn* conn, const std::string& progress_table) {
  const std::string quoted = QuoteQualifiedName(progress_table);
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgResultPtr exists,
      slot::ExecPg(conn, "SELECT to_regclass($1) IS NOT NULL", {quoted.c_str()},
                   "lag: looking up the progress table " + progress_table));
  WalrelaySlots slots;
  if (std::string_view(PQgetvalue(exists.get(), 0, 0)) != "t") return slots;
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgResultPtr r,
      slot::ExecPg(conn,
                   "SELECT slot, extract(epoch FROM now() - max(updated_at))::bigint FROM " +
                       quoted + " GROUP BY slot",
                   {}, "lag: reading the progress table " + progress_table));
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    slots[PQgetvalue(r.get(), i, 0)] = std::atoll(PQgetvalue(r.get(), i, 1));
  }
  return slots;
}

std::string Ago(int64_t seconds) {
  if (seconds < 120) return std::to_string(seconds) + " s";
  if (seconds < 7200) return std::to_string(seconds / 60) + " min";
  if (seconds < 172800) return std::to_string(seconds / 3600) + " h";
  return std::to_string(seconds / 86400) + " days";
}

// A walrelay slot that no relay reads keeps WAL until one does: a warning at least, once it
// has been unread for a minute (a relay between two sessions lets it go for a second).
// Servers before 17 do not say since when; then it warns at once and names the last
// progress walrelay recorded.
void CheckUnread(Row& r, const WalrelaySlots& walrelay) {
  auto it = walrelay.find(r.name);
  // A standby's synchronized copy (17+) is never read there: not news.
  if (it == walrelay.end() || !r.info || r.info->active || r.info->synced) return;
  r.walrelay = true;
  if (r.eval.state != SlotState::kOk) return;
  const auto& since = r.info->inactive_seconds;
  if (since && *since < 60) return;
  r.eval.state = SlotState::kWarn;
  r.eval.reason =
      "walrelay's slot, and no relay reads it" +
      (since ? " (unread for " + Ago(*since) + ", since " + r.info->inactive_since + ")"
             : " (this server does not record since when; walrelay last recorded progress " +
                   Ago(it->second) + " ago)") +
      ": it keeps WAL until a relay streams it again, and every event since waits. Fix: start "
      "`walrelay run` for it, or drop it (SELECT pg_drop_replication_slot('" + r.name +
      "')) if no relay will read it again: its unpublished events are then lost to WAL mode "
      "(republish them)";
}

Result<Snapshot> Collect(slot::SlotAdmin& admin, const Threshold& given_warn,
                         const Threshold& given_critical, const std::vector<std::string>& only,
                         const WalrelaySlots& walrelay) {
  Snapshot s;
  WALRELAY_ASSIGN_OR_RETURN(s.settings, admin.GetServerSettings());
  WALRELAY_ASSIGN_OR_RETURN(std::vector<slot::SlotInfo> slots, admin.ListSlots());
  WALRELAY_ASSIGN_OR_RETURN(s.current, admin.CurrentWalLsn());
  const int64_t keep = s.settings.max_slot_wal_keep_size_bytes;
  // Without thresholds, walrelay's slots get the relay's own (guard.warn, guard.critical),
  // so that the check and the relay agree; other slots fail only when lost or unreserved.
  const bool defaults =
      given_warn.kind == Threshold::Kind::kNone && given_critical.kind == Threshold::Kind::kNone;
  const relay::RelayConfig relay_defaults;
  const Threshold relay_warn = *Threshold::Parse(relay_defaults.guard_warn);
  const Threshold relay_critical = *Threshold::Parse(relay_defaults.guard_critical);
  s.warn_bytes = given_warn.Resolve(keep);
  s.critical_bytes = given_critical.Resolve(keep);
  for (auto& info : slots) {
    if (!only.empty() && std::find(only.begin(), only.end(), info.slot_name) == only.end()) {
      continue;
    }
    Row r;
    r.name = info.slot_name;
    const bool ours = walrelay.count(r.name) > 0 && defaults;
    r.eval = relay::EvaluateSlot(info, keep, ours ? relay_warn : given_warn,
                                 ours ? relay_critical : given_critical);
    r.info = std::move(info);
    CheckUnread(r, walrelay);
    s.rows.push_back(std::move(r));
  }
  for (const auto& want : only) {
    const bool found =
        std::any_of(s.rows.begin(), s.rows.end(), [&](const Row& r) { return r.name == want; });
    if (!found) {
      Row r;
      r.name = want;
      r.eval.state = SlotState::kMissing;
      r.eval.reason = "the slot does not exist";
      s.rows.push_back(std::move(r));
    }
  }
  for (const auto& r : s.rows) {
    s.exit_code = std::max(s.exit_code, relay::SlotStateSeverity(r.eval.state));
  }
  return s;
}

// --tables: one row per table that exists (ReadTableHealth), the others named.
Status CollectTables(PGconn* conn, const std::vector<std::string>& tables, Snapshot* s) {
  for (const std::string& t : tables) {
    // NAME or NAME:COLUMN (the timestamp column its oldest row is found by).
    const size_t colon = t.rfind(':');
    relay::HealthTable spec = colon == std::string::npos
                                  ? relay::HealthTable(t)
                                  : relay::HealthTable(t.substr(0, colon), t.substr(colon + 1));
    WALRELAY_ASSIGN_OR_RETURN(std::vector<relay::TableHealthRow> rows,
                              relay::ReadTableHealth(conn, {spec}));
    if (rows.empty()) {
      s->missing_tables.push_back(spec.name);
    } else {
      s->tables.push_back(std::move(rows.front()));
    }
  }
  return Status::Ok();
}

std::string Seconds(const std::optional<double>& v) {
  if (!v) return "never";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0fs", *v);
  return buf;
}

std::string OptBytes(const std::optional<uint64_t>& b) {
  return b ? relay::FormatBytes(*b) : "n/a";
}

std::string SafeWalSize(const Row& r, int64_t keep) {
  if (!r.info) return "n/a";
  if (r.info->safe_wal_size) {
    return *r.info->safe_wal_size < 0
               ? "-" + relay::FormatBytes(static_cast<uint64_t>(-*r.info->safe_wal_size))
               : relay::FormatBytes(static_cast<uint64_t>(*r.info->safe_wal_size));
  }
  return keep < 0 ? "unlimited" : "n/a";
}

std::string KeepSize(int64_t keep) {
  return keep < 0 ? "unlimited (-1)" : relay::FormatBytes(static_cast<uint64_t>(keep));
}

// ---------------------------------------------------------------------------- table

// Rows of cells as left-aligned columns two spaces apart.
std::string Columns(const std::vector<std::vector<std::string>>& cells) {
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& row : cells) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : cells) {
    for (size_t c = 0; c < row.size(); ++c) {
      out += row[c];
      if (c + 1 < row.size()) out += std::string(width[c] - row[c].size() + 2, ' ');
    }
    out += "\n";
  }
  return out;
}

// The FAILOVER cell (PostgreSQL 17+): no, yes (a failover slot), synced (a standby's copy
// of one, which a promotion keeps) or synced-temporary (a copy not yet safe: a promotion
// drops it).
std::string FailoverCell(const slot::SlotInfo& i) {
  if (i.synced) return i.temporary ? "synced-temporary" : "synced";
  return i.failover ? "yes" : "no";
}

std::string RenderTable(const Snapshot& s) {
  std::ostringstream out;
  out << "server WAL " << s.current.ToString() << ", max_slot_wal_keep_size "
      << KeepSize(s.settings.max_slot_wal_keep_size_bytes) << ", warn " << OptBytes(s.warn_bytes)
      << ", critical " << OptBytes(s.critical_bytes) << "\n";
  if (s.settings.max_slot_wal_keep_size_bytes < 0) {
    out << "note: max_slot_wal_keep_size is unlimited: an unread slot can fill the disk\n";
  }
  std::vector<std::vector<std::string>> cells = {{"SLOT", "PLUGIN", "TYPE", "DATABASE", "ACTIVE",
                                                  "PID", "RETAINED", "CONFIRMED_LAG", "WAL_STATUS",
                                                  "SAFE_WAL_SIZE", "INACTIVE_SINCE", "FAILOVER",
                                                  "STATE"}};
  const bool since_17 = slot::SupportsFailoverSlots(s.settings.server_version_num);
  for (const auto& r : s.rows) {
    const auto* i = r.info ? &*r.info : nullptr;
    auto dash = [](const std::string& v) { return v.empty() ? std::string("-") : v; };
    cells.push_back({r.name, i ? dash(i->plugin) : "-", i ? i->slot_type : "-",
                     i ? dash(i->database) : "-", i ? (i->active ? "yes" : "no") : "-",
                     i && i->active_pid ? std::to_string(*i->active_pid) : "-",
                     OptBytes(i ? i->retained_wal_bytes() : std::nullopt),
                     OptBytes(i ? i->confirmed_lag_bytes() : std::nullopt),
                     i ? dash(i->wal_status) : "-",
                     SafeWalSize(r, s.settings.max_slot_wal_keep_size_bytes),
                     !i                          ? "-"
                     : !i->inactive_since.empty() ? i->inactive_since
                     : since_17                   ? "-"
                                                  : "n/a",
                     !i ? "-" : since_17 ? FailoverCell(*i) : "n/a",
                     std::string(relay::SlotStateName(r.eval.state))});
  }
  out << Columns(cells);
  if (s.rows.empty()) out << "(no replication slots)\n";
  for (const auto& r : s.rows) {
    if (r.eval.state != SlotState::kOk) {
      out << r.name << ": " << relay::SlotStateName(r.eval.state) << ": " << r.eval.reason << "\n";
    }
  }
  if (!s.tables.empty() || !s.missing_tables.empty()) {
    out << "\n";
    std::vector<std::vector<std::string>> t = {{"TABLE", "LIVE_ROWS", "DEAD_ROWS", "SIZE",
                                                "SINCE_VACUUM", "SINCE_ANALYZE",
                                                "INVALID_INDEXES", "PARTITIONS", "OLDEST_ROW"}};
    for (const relay::TableHealthRow& h : s.tables) {
      t.push_back({h.table, std::to_string(h.live_rows), std::to_string(h.dead_rows),
                   relay::FormatBytes(static_cast<uint64_t>(h.total_bytes)),
                   Seconds(h.seconds_since_vacuum), Seconds(h.seconds_since_analyze),
                   std::to_string(h.invalid_indexes),
                   h.partitions > 0 ? std::to_string(h.partitions) : "-",
                   h.oldest_row_seconds ? Seconds(h.oldest_row_seconds) : "-"});
    }
    out << Columns(t);
    for (const std::string& m : s.missing_tables) out << "note: table " << m << " not found\n";
  }
  return out.str();
}

// ---------------------------------------------------------------------------- JSON

std::string JsonString(std::string_view v) { return JsonQuote(v); }

template <typename T>
std::string JsonOpt(const std::optional<T>& v) {
  return v ? std::to_string(*v) : "null";
}

std::string JsonOptLsn(const std::optional<Lsn>& v) {
  return v ? JsonString(v->ToString()) : "null";
}

std::string RenderJson(const Snapshot& s) {
  std::string o = "{";
  o += "\"current_wal_lsn\":" + JsonString(s.current.ToString());
  o += ",\"max_slot_wal_keep_size_bytes\":" +
       std::to_string(s.settings.max_slot_wal_keep_size_bytes);
  o += ",\"warn_bytes\":" + JsonOpt(s.warn_bytes);
  o += ",\"critical_bytes\":" + JsonOpt(s.critical_bytes);
  o += ",\"exit_code\":" + std::to_string(s.exit_code);
  o += ",\"slots\":[";
  for (size_t k = 0; k < s.rows.size(); ++k) {
    const Row& r = s.rows[k];
    const auto* i = r.info ? &*r.info : nullptr;
    if (k > 0) o += ",";
    o += "{\"slot_name\":" + JsonString(r.name);
    o += ",\"exists\":" + std::string(i ? "true" : "false");
    o += ",\"walrelay\":" + std::string(r.walrelay ? "true" : "false");
    if (i != nullptr) {
      o += ",\"plugin\":" + (i->plugin.empty() ? "null" : JsonString(i->plugin));
      o += ",\"slot_type\":" + JsonString(i->slot_type);
      o += ",\"database\":" + (i->database.empty() ? "null" : JsonString(i->database));
      o += ",\"temporary\":" + std::string(i->temporary ? "true" : "false");
      o += ",\"active\":" + std::string(i->active ? "true" : "false");
      o += ",\"active_pid\":" + JsonOpt(i->active_pid);
      o += ",\"restart_lsn\":" + JsonOptLsn(i->restart_lsn);
      o += ",\"confirmed_flush_lsn\":" + JsonOptLsn(i->confirmed_flush_lsn);
      o += ",\"retained_bytes\":" + JsonOpt(i->retained_wal_bytes());
      o += ",\"retained\":" + JsonString(OptBytes(i->retained_wal_bytes()));
      o += ",\"confirmed_lag_bytes\":" + JsonOpt(i->confirmed_lag_bytes());
      o += ",\"confirmed_lag\":" + JsonString(OptBytes(i->confirmed_lag_bytes()));
      o += ",\"wal_status\":" + (i->wal_status.empty() ? "null" : JsonString(i->wal_status));
      o += ",\"safe_wal_size_bytes\":" + JsonOpt(i->safe_wal_size);
      o += ",\"inactive_since\":" +
           (i->inactive_since.empty() ? "null" : JsonString(i->inactive_since));
      o += ",\"inactive_seconds\":" + JsonOpt(i->inactive_seconds);
      const bool since_17 = slot::SupportsFailoverSlots(s.settings.server_version_num);
      auto flag = [since_17](bool v) { return !since_17 ? "null" : v ? "true" : "false"; };
      o += ",\"failover\":" + std::string(flag(i->failover));
      o += ",\"synced\":" + std::string(flag(i->synced));
    }
    o += ",\"state\":" + JsonString(relay::SlotStateName(r.eval.state));
    o += ",\"reason\":" + JsonString(r.eval.reason);
    o += "}";
  }
  o += "]";
  if (!s.tables.empty() || !s.missing_tables.empty()) {
    o += ",\"tables\":[";
    for (size_t k = 0; k < s.tables.size(); ++k) {
      const relay::TableHealthRow& h = s.tables[k];
      auto seconds = [](const std::optional<double>& v) {
        return v ? std::to_string(static_cast<int64_t>(*v)) : std::string("null");
      };
      if (k > 0) o += ",";
      o += "{\"table\":" + JsonString(h.table);
      o += ",\"live_rows\":" + std::to_string(h.live_rows);
      o += ",\"dead_rows\":" + std::to_string(h.dead_rows);
      o += ",\"total_bytes\":" + std::to_string(h.total_bytes);
      o += ",\"seconds_since_vacuum\":" + seconds(h.seconds_since_vacuum);
      o += ",\"seconds_since_analyze\":" + seconds(h.seconds_since_analyze);
      o += ",\"invalid_indexes\":" + std::to_string(h.invalid_indexes);
      o += ",\"partitions\":" + std::to_string(h.partitions);
      o += ",\"oldest_partition_seconds\":" + seconds(h.seconds_since_oldest_partition);
      o += ",\"oldest_row_seconds\":" + seconds(h.oldest_row_seconds) + "}";
    }
    o += "],\"missing_tables\":[";
    for (size_t k = 0; k < s.missing_tables.size(); ++k) {
      o += (k > 0 ? "," : "") + JsonString(s.missing_tables[k]);
    }
    o += "]";
  }
  o += "}\n";
  return o;
}

// ---------------------------------------------------------------------------- Prometheus

std::string RenderPrometheus(const Snapshot* s, int exit_code) {
  metrics::Registry reg;
  reg.AddGauge(mn::kLagCheckStatus.name, mn::kLagCheckStatus.help).Set(exit_code);
  if (s != nullptr) {
    reg.AddGauge(mn::kMaxSlotWalKeepSize.name, mn::kMaxSlotWalKeepSize.help)
        .Set(static_cast<double>(s->settings.max_slot_wal_keep_size_bytes));
    reg.AddGauge(mn::kSlotWarnThreshold.name, mn::kSlotWarnThreshold.help)
        .Set(s->warn_bytes ? static_cast<double>(*s->warn_bytes) : -1);
    reg.AddGauge(mn::kSlotCriticalThreshold.name, mn::kSlotCriticalThreshold.help)
        .Set(s->critical_bytes ? static_cast<double>(*s->critical_bytes) : -1);
    for (const Row& r : s->rows) {
      const auto* i = r.info ? &*r.info : nullptr;
      metrics::Labels l = {{"slot", r.name}};
      if (i != nullptr) {
        l.emplace_back("plugin", i->plugin);
        l.emplace_back("database", i->database);
        l.emplace_back("slot_type", i->slot_type);
        auto opt = [](const std::optional<uint64_t>& v) {
          return v ? static_cast<double>(*v) : -1.0;
        };
        reg.AddGauge(mn::kSlotRetainedBytes.name, mn::kSlotRetainedBytes.help, l)
            .Set(opt(i->retained_wal_bytes()));
        reg.AddGauge(mn::kSlotConfirmedLagBytes.name, mn::kSlotConfirmedLagBytes.help, l)
            .Set(opt(i->confirmed_lag_bytes()));
        reg.AddGauge(mn::kSlotSafeWalSize.name, mn::kSlotSafeWalSize.help, l)
            .Set(i->safe_wal_size ? static_cast<double>(*i->safe_wal_size) : -1);
        reg.AddGauge(mn::kSlotActive.name, mn::kSlotActive.help, l).Set(i->active ? 1 : 0);
        for (const char* st : {"reserved", "extended", "unreserved", "lost"}) {
          metrics::Labels sl = l;
          sl.emplace_back("status", st);
          reg.AddGauge(mn::kSlotWalStatus.name, mn::kSlotWalStatus.help, sl)
              .Set(i->wal_status == st ? 1 : 0);
        }
        if (slot::SupportsFailoverSlots(s->settings.server_version_num)) {
          const std::string current = FailoverCell(*i);
          for (const char* f : {"no", "yes", "synced", "synced-temporary"}) {
            metrics::Labels fl = l;
            fl.emplace_back("failover", f);
            reg.AddGauge(mn::kSlotFailover.name, mn::kSlotFailover.help, fl)
                .Set(current == f ? 1 : 0);
          }
        }
      }
      for (SlotState st : {SlotState::kOk, SlotState::kWarn, SlotState::kCritical, SlotState::kLost,
                           SlotState::kMissing}) {
        metrics::Labels sl = l;
        sl.emplace_back("state", std::string(relay::SlotStateName(st)));
        reg.AddGauge(mn::kSlotState.name, mn::kSlotState.help, sl).Set(st == r.eval.state ? 1 : 0);
      }
    }
    for (const relay::TableHealthRow& h : s->tables) relay::SetTableHealthGauges(h, reg);
  }
  return reg.Render();
}

std::string ResolveDsn(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = std::getenv("WALRELAY_SOURCE_DSN");
  return env != nullptr ? env : "";  // empty: libpq's PG* variables and defaults
}

}  // namespace

LagCommand::LagCommand(CLI::App* parent) {
  app_ = parent->add_subcommand(
      "lag",
      "Show every replication slot of the cluster with the WAL it retains and how far its "
      "reader lags, over a normal connection. As a monitoring check it exits 0 ok, 1 warn, "
      "2 critical (over --critical, wal_status lost/unreserved, or a --slot that is missing), "
      "3 cannot connect or bad usage.");
  app_->add_option("--dsn", dsn_,
                   "libpq conninfo or URI of the server. Default: $WALRELAY_SOURCE_DSN, else "
                   "libpq's PGHOST/PGPORT/PGUSER/PGDATABASE/PGPASSWORD");
  app_->add_option("--password-file", password_file_,
                   "File whose first line is the password (owner-only, like .pgpass); never "
                   "logged")
      ->envname("WALRELAY_SOURCE_PASSWORD_FILE");
  app_->add_option("--warn", warn_,
                   "Warn when a slot retains this much WAL: bytes with a unit (512MB, 1GB; "
                   "1024-based) or a fraction of max_slot_wal_keep_size (0.5, 50%)");
  app_->add_option("--critical", critical_, "Critical threshold, same forms as --warn");
  app_->add_option("--progress-table", progress_table_,
                   "walrelay's progress table (source.progress_table): the slots it names are "
                   "walrelay's. Such a slot that no relay reads is a warning (after a minute "
                   "unread on PostgreSQL 17+), and without --warn/--critical it is judged by "
                   "the relay's own guard thresholds (1GB, 8GB). Default: walrelay_progress")
      ->capture_default_str();
  app_->add_option("--slot", slots_,
                   "Only these slots (repeatable); a listed slot that does not exist is "
                   "critical");
  app_->add_option("--tables", tables_,
                   "Also show these tables' health (outbox, inbox, dead-letter; comma-separated "
                   "or repeated): live and dead rows, size, seconds since (auto)vacuum and "
                   "(auto)analyze, invalid indexes, partitions (a partitioned table: summed); "
                   "NAME:COLUMN adds the oldest row's age by that timestamp column when an "
                   "index leads with it (outbox:created_at, inbox:received_at)")
      ->delimiter(',');
  app_->add_option("--watch", watch_seconds_,
                   "Refresh every SECONDS until interrupted (exit code of the last round)")
      ->check(CLI::PositiveNumber);
  auto* json = app_->add_flag("--json", json_, "One JSON document per refresh instead of a table");
  auto* prom =
      app_->add_flag("--prometheus", prometheus_,
                     "Prometheus text exposition (for node_exporter's textfile collector)");
  json->excludes(prom);
  app_->footer(
      "Retained = server WAL - restart_lsn (WAL kept on disk; what thresholds compare); the "
      "server WAL is pg_current_wal_lsn(), on a standby the last replayed position. Confirmed "
      "lag = server WAL - confirmed_flush_lsn. INACTIVE_SINCE: when the slot's reader last let "
      "it go (UTC; '-' while active), from PostgreSQL 17's inactive_since. FAILOVER "
      "(PostgreSQL 17+): yes for a failover slot; on a standby, synced for the synchronized "
      "copy of one (a promotion keeps it) or synced-temporary (not yet safe: a promotion "
      "drops it). Both n/a on older servers, which do not record them.\n"
      "Example check: walrelay lag --dsn 'host=db user=monitor' --warn 0.5 --critical 0.8\n"
      "Textfile collector: walrelay lag --prometheus > f.tmp && mv f.tmp "
      "/var/lib/node_exporter/walrelay.prom");
}

bool LagCommand::parsed() const { return app_->parsed(); }

int LagCommand::Run() const {
  auto warn = Threshold::Parse(warn_);
  auto critical = Threshold::Parse(critical_);
  for (const auto* t : {&warn, &critical}) {
    if (!t->ok()) {
      std::cerr << "walrelay lag: " << t->status().message() << "\n";
      return kLagExitUnknown;
    }
  }
  slot::ConnInfo dsn(ResolveDsn(dsn_));
  if (!password_file_.empty()) {
    Result<std::string> password = slot::ReadPasswordFile(password_file_);
    if (!password.ok()) {
      std::cerr << "walrelay lag: --password-file: " << password.status().message() << "\n";
      return kLagExitUnknown;
    }
    dsn.password = *password;
  }
  const bool watch = watch_seconds_ > 0;
  if (watch) {
    struct sigaction sa {};
    sa.sa_handler = OnLagSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
  }
  const bool tty = isatty(STDOUT_FILENO) == 1;

  std::unique_ptr<slot::SlotAdmin> admin;
  slot::PgConnPtr health_conn;  // --tables, and walrelay's progress table
  int code = kLagExitUnknown;
  do {
    Result<Snapshot> snap = UnavailableError("not connected");
    if (!admin) {
      auto a = slot::SlotAdmin::Connect(dsn);
      if (a.ok()) {
        admin = std::move(a).value();
      } else {
        snap = a.status();
      }
    }
    if (admin && !health_conn) {
      auto c = slot::ConnectPg(dsn, "false", "lag");
      if (c.ok()) {
        health_conn = std::move(*c);
      } else {
        snap = c.status();
      }
    }
    if (admin && health_conn) {
      WalrelaySlots walrelay;
      if (auto w = ReadWalrelaySlots(health_conn.get(), progress_table_); w.ok()) {
        walrelay = std::move(*w);
      } else if (!progress_warned_) {  // e.g. no SELECT on it: the check goes on without
        progress_warned_ = true;
        std::cerr << "walrelay lag: note: " << w.status().message()
                  << "; walrelay's slots are judged like any other (grant SELECT on "
                  << progress_table_ << " to this role)\n";
      }
      snap = Collect(*admin, *warn, *critical, slots_, walrelay);
      if (snap.ok() && !tables_.empty()) {
        if (Status st = CollectTables(health_conn.get(), tables_, &*snap); !st.ok()) {
          health_conn.reset();
          snap = st;
        }
      }
      if (!snap.ok() && snap.status().code() == StatusCode::kUnavailable) {
        admin.reset();
        health_conn.reset();
      }
    }
    if (snap.ok()) {
      code = snap->exit_code;
      if (json_) {
        std::cout << RenderJson(*snap);
      } else if (prometheus_) {
        std::cout << RenderPrometheus(&*snap, code);
      } else {
        if (watch && tty) std::cout << "\033[H\033[2J";
        std::cout << RenderTable(*snap);
      }
    } else {
      code = kLagExitUnknown;
      std::cerr << "walrelay lag: " << snap.status().ToString() << "\n";
      if (prometheus_) std::cout << RenderPrometheus(nullptr, code);
    }
    std::cout.flush();
    if (!watch) break;
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(watch_seconds_ * 1000));
    while (!g_lag_stop.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } while (!g_lag_stop.load());
  return code;
}

}  // namespace walrelay::cli
