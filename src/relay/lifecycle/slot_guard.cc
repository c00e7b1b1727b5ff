#include "src/relay/lifecycle/slot_guard.h"

#include <spdlog/spdlog.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "base/sql.h"
#include "slot/pg_error.h"
#include "slot/replication_connection.h"
#include "src/relay/core/metric_names.h"
#include "src/relay/recovery/backfill.h"
#include "src/relay/core/schema.h"

namespace walrelay::relay {
namespace {

namespace mn = metric_names;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Parses a non-negative decimal number ("12", "1.5"); false on anything else.
bool ParseNumber(std::string_view text, double* out) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || c == '.')) return false;
  }
  std::string s(text);
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end != nullptr && *end == '\0' && std::isfinite(*out);
}

std::string Opt(const std::optional<uint64_t>& b) { return b ? FormatBytes(*b) : "n/a"; }

}  // namespace

// ---------------------------------------------------------------------------- sizes

Result<uint64_t> ParseByteSize(std::string_view text) {
  const std::string_view t = Trim(text);
  size_t i = 0;
  while (i < t.size() && ((t[i] >= '0' && t[i] <= '9') || t[i] == '.')) ++i;
  double number = 0;
  if (!ParseNumber(t.substr(0, i), &number)) {
    return InvalidArgumentError("'" + std::string(text) +
                                "' is not a size (examples: 1048576, 512MB, 1.5GB)");
  }
  const std::string unit = Lower(Trim(t.substr(i)));
  double factor = 0;
  if (unit.empty() || unit == "b") {
    factor = 1;
  } else if (unit == "kb" || unit == "kib" || unit == "k") {
    factor = 1024.0;
  } else if (unit == "mb" || unit == "mib" || unit == "m") {
    factor = 1024.0 * 1024;
  } else if (unit == "gb" || unit == "gib" || unit == "g") {
    factor = 1024.0 * 1024 * 1024;
  } else if (unit == "tb" || unit == "tib" || unit == "t") {
    factor = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return InvalidArgumentError("'" + std::string(text) + "': unknown unit '" + unit +
                                "' (use B, kB, MB, GB or TB; 1024-based)");
  }
  const double bytes = number * factor;
  if (bytes >= 1.8e19) return InvalidArgumentError("'" + std::string(text) + "' is too large");
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf,
                v >= 100  ? "%.0f %s"
                : v >= 10 ? "%.1f %s"
                          : "%.2f %s",
                v, kUnits[u]);
  return buf;
}

// ---------------------------------------------------------------------------- Threshold

Result<Threshold> Threshold::Parse(std::string_view text) {
  const std::string t = Lower(Trim(text));
  if (t.empty() || t == "none" || t == "off") return Threshold::None();
  if (t.back() == '%') {
    double pct = 0;
    if (!ParseNumber(Trim(std::string_view(t).substr(0, t.size() - 1)), &pct) || pct <= 0 ||
        pct > 100) {
      return InvalidArgumentError("threshold '" + std::string(text) +
                                  "': a percentage must be in (0%, 100%]");
    }
    return Threshold::Fraction(pct / 100);
  }
  double number = 0;
  if (t.find('.') != std::string::npos && ParseNumber(t, &number)) {
    if (number <= 0 || number > 1) {
      return InvalidArgumentError("threshold '" + std::string(text) +
                                  "': a fraction of max_slot_wal_keep_size must be in (0, 1]; "
                                  "write bytes with a unit, e.g. 512MB");
    }
    return Threshold::Fraction(number);
  }
  auto bytes = ParseByteSize(t);
  if (!bytes.ok()) {
    return InvalidArgumentError("threshold '" + std::string(text) +
                                "' is neither a size (512MB, 1GB, 1048576) nor a fraction of "
                                "max_slot_wal_keep_size (0.5, 80%)");
  }
  return Threshold::Bytes(*bytes);
}

std::optional<uint64_t> Threshold::Resolve(int64_t max_keep_bytes) const {
  switch (kind) {
    case Kind::kNone:
      return std::nullopt;
    case Kind::kBytes:
      return bytes;
    case Kind::kFraction:
      if (max_keep_bytes < 0) return std::nullopt;
      return static_cast<uint64_t>(std::llround(fraction * static_cast<double>(max_keep_bytes)));
  }
  return std::nullopt;
}

std::string Threshold::ToString() const {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kBytes:
      return FormatBytes(bytes);
    case Kind::kFraction: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%g of max_slot_wal_keep_size", fraction);
      return buf;
    }
  }
  return "none";
}

// ---------------------------------------------------------------------------- evaluation

std::string_view SlotStateName(SlotState s) {
  switch (s) {
    case SlotState::kOk:
      return "ok";
    case SlotState::kWarn:
      return "warn";
    case SlotState::kCritical:
      return "critical";
    case SlotState::kLost:
      return "lost";
    case SlotState::kMissing:
      return "missing";
  }
  return "unknown";
}

int SlotStateSeverity(SlotState s) {
  switch (s) {
    case SlotState::kOk:
      return 0;
    case SlotState::kWarn:
      return 1;
    default:
      return 2;
  }
}

SlotEvaluation EvaluateSlot(const slot::SlotInfo& slot, int64_t max_keep, const Threshold& warn,
                            const Threshold& critical) {
  SlotEvaluation e;
  e.warn_bytes = warn.Resolve(max_keep);
  e.critical_bytes = critical.Resolve(max_keep);
  e.measured_bytes = slot.retained_wal_bytes();
  if (!e.measured_bytes) e.measured_bytes = slot.confirmed_lag_bytes();
  if (slot.invalidated()) {
    e.state = SlotState::kLost;
    e.reason =
        "the slot can no longer stream: " + slot::ExplainSlotInvalidation(slot.invalidation_reason);
    return e;
  }
  if (e.critical_bytes && e.measured_bytes && *e.measured_bytes >= *e.critical_bytes) {
    e.state = SlotState::kCritical;
    e.reason = "retains " + FormatBytes(*e.measured_bytes) + ", at or above the critical " +
               FormatBytes(*e.critical_bytes);
    return e;
  }
  if (slot.wal_status == "unreserved") {
    e.state = SlotState::kCritical;
    e.reason =
        "wal_status is 'unreserved': the next checkpoint removes WAL the slot still needs "
        "(max_slot_wal_keep_size exceeded)";
    return e;
  }
  if (e.warn_bytes && e.measured_bytes && *e.measured_bytes >= *e.warn_bytes) {
    e.state = SlotState::kWarn;
    e.reason = "retains " + FormatBytes(*e.measured_bytes) + ", at or above the warn " +
               FormatBytes(*e.warn_bytes);
    return e;
  }
  e.state = SlotState::kOk;
  e.reason = "retains " + Opt(e.measured_bytes);
  return e;
}

// ---------------------------------------------------------------------------- SlotGuard

SlotGuard::SlotGuard(SlotGuardOptions options) : options_(std::move(options)) {
  metrics::Registry* r = options_.registry;
  if (r == nullptr) return;
  const metrics::Labels l = {{"slot", options_.slot}};
  auto gauge = [&](const mn::MetricName& m) { return &r->AddGauge(m.name, m.help, l); };
  retained_ = gauge(mn::kSlotRetainedBytes);
  confirmed_lag_ = gauge(mn::kSlotConfirmedLagBytes);
  safe_wal_size_ = gauge(mn::kSlotSafeWalSize);
  active_ = gauge(mn::kSlotActive);
  warn_threshold_ = gauge(mn::kSlotWarnThreshold);
  critical_threshold_ = gauge(mn::kSlotCriticalThreshold);
  max_keep_ = &r->AddGauge(mn::kMaxSlotWalKeepSize.name, mn::kMaxSlotWalKeepSize.help);
  last_success_ = gauge(mn::kSlotGuardLastPoll);
  polls_ = &r->AddCounter(mn::kSlotGuardPolls.name, mn::kSlotGuardPolls.help, l);
  errors_ = &r->AddCounter(mn::kSlotGuardErrors.name, mn::kSlotGuardErrors.help, l);
  for (const char* s : {"reserved", "extended", "unreserved", "lost"}) {
    wal_status_.emplace_back(s, &r->AddGauge(mn::kSlotWalStatus.name, mn::kSlotWalStatus.help,
                                             {{"slot", options_.slot}, {"status", s}}));
  }
  for (SlotState s : {SlotState::kOk, SlotState::kWarn, SlotState::kCritical, SlotState::kLost,
                      SlotState::kMissing}) {
    state_gauges_.emplace_back(
        s, &r->AddGauge(mn::kSlotState.name, mn::kSlotState.help,
                        {{"slot", options_.slot}, {"state", std::string(SlotStateName(s))}}));
  }
  state_gauges_.front().second->Set(1);  // ok until told otherwise
  warn_threshold_->Set(-1);
  critical_threshold_->Set(-1);
  safe_wal_size_->Set(-1);
}

SlotGuard::~SlotGuard() { Stop(); }

std::optional<SlotGuard::Snapshot> SlotGuard::last() const {
  std::lock_guard lock(mu_);
  return last_;
}

Status SlotGuard::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_;
}

void SlotGuard::Export(const Snapshot& snap) {
  if (options_.registry == nullptr) return;
  const auto& e = snap.evaluation;
  const auto& s = snap.slot;
  auto set_opt = [](metrics::Gauge* g, const std::optional<uint64_t>& v) {
    g->Set(v ? static_cast<double>(*v) : -1);
  };
  set_opt(retained_, s ? s->retained_wal_bytes() : std::nullopt);
  set_opt(confirmed_lag_, s ? s->confirmed_lag_bytes() : std::nullopt);
  safe_wal_size_->Set(s && s->safe_wal_size ? static_cast<double>(*s->safe_wal_size) : -1);
  active_->Set(s && s->active ? 1 : 0);
  set_opt(warn_threshold_, e.warn_bytes);
  set_opt(critical_threshold_, e.critical_bytes);
  max_keep_->Set(static_cast<double>(snap.settings.max_slot_wal_keep_size_bytes));
  for (auto& [name, g] : wal_status_) g->Set(s && s->wal_status == name ? 1 : 0);
  for (auto& [state, g] : state_gauges_) g->Set(state == e.state ? 1 : 0);
  last_success_->Set(std::chrono::duration<double>(snap.at.time_since_epoch()).count());
}

Result<SlotState> SlotGuard::Poll() {
  std::lock_guard poll_lock(poll_mu_);
  if (polls_ != nullptr) polls_->Inc();
  auto fail = [&](Status st) -> Result<SlotState> {
    if (errors_ != nullptr) errors_->Inc();
    if (!failing_) {
      spdlog::warn("slot guard: cannot read slot {}: {} (keeping state {}, retrying)",
                   options_.slot, st.ToString(), SlotStateName(state()));
    }
    failing_ = true;
    if (st.code() == StatusCode::kUnavailable) admin_.reset();  // reconnect next time
    std::lock_guard lock(mu_);
    last_error_ = st;
    return st;
  };

  if (!admin_) {
    auto a = slot::SlotAdmin::Connect(options_.conninfo);
    if (!a.ok()) return fail(a.status());
    admin_ = std::move(a).value();
  }
  auto settings = admin_->GetServerSettings();
  if (!settings.ok()) return fail(settings.status());
  Snapshot snap;
  snap.settings = *settings;
  snap.at = std::chrono::system_clock::now();
  auto info = admin_->GetSlot(options_.slot);
  if (info.ok()) {
    snap.slot = *info;
    snap.evaluation = EvaluateSlot(*info, settings->max_slot_wal_keep_size_bytes, options_.warn,
                                   options_.critical);
  } else if (info.status().code() == StatusCode::kNotFound) {
    snap.evaluation.state = SlotState::kMissing;
    snap.evaluation.warn_bytes = options_.warn.Resolve(settings->max_slot_wal_keep_size_bytes);
    snap.evaluation.critical_bytes =
        options_.critical.Resolve(settings->max_slot_wal_keep_size_bytes);
    snap.evaluation.reason = "the slot does not exist";
  } else {
    return fail(info.status());
  }
  if (failing_) spdlog::info("slot guard: reading slot {} again", options_.slot);
  failing_ = false;

  const SlotState now = snap.evaluation.state;
  const SlotState before = state_.exchange(now, std::memory_order_relaxed);
  const bool changed = !have_state_ || before != now;
  if (changed && !(now == SlotState::kOk && !have_state_)) {
    const std::string line = fmt::format(
        "slot guard: slot {} {} -> {}: {}; retained {}, confirmed lag {}, wal_status {}, "
        "safe_wal_size {}, thresholds warn {} / critical {}",
        options_.slot, have_state_ ? SlotStateName(before) : "start", SlotStateName(now),
        snap.evaluation.reason, Opt(snap.slot ? snap.slot->retained_wal_bytes() : std::nullopt),
        Opt(snap.slot ? snap.slot->confirmed_lag_bytes() : std::nullopt),
        snap.slot && !snap.slot->wal_status.empty() ? snap.slot->wal_status : "n/a",
        snap.slot && snap.slot->safe_wal_size
            ? FormatBytes(static_cast<uint64_t>(std::max<int64_t>(0, *snap.slot->safe_wal_size)))
            : (snap.settings.max_slot_wal_keep_size_bytes < 0 ? "unlimited" : "n/a"),
        options_.warn.ToString(), options_.critical.ToString());
    switch (now) {
      case SlotState::kOk:
        spdlog::info("{}", line);
        break;
      case SlotState::kWarn:
        spdlog::warn("{}", line);
        break;
      case SlotState::kCritical:
      case SlotState::kMissing:
        spdlog::error("{}", line);
        break;
      case SlotState::kLost:
        spdlog::critical("{}", line);
        break;
    }
  } else if (changed) {
    spdlog::info("slot guard: slot {} ok: {}", options_.slot, snap.evaluation.reason);
  }
  have_state_ = true;
  Export(snap);
  {
    std::lock_guard lock(mu_);
    last_ = snap;
    last_error_ = Status::Ok();
  }
  if (changed && options_.on_change) {
    options_.on_change(before, now, snap.slot ? &*snap.slot : nullptr);
  }
  return now;
}

void SlotGuard::Start() {
  periodic_.Start(options_.interval, [this] { Poll().status().IgnoreError(); });  // logged inside
}

void SlotGuard::Stop() { periodic_.Stop(); }

// ---------------------------------------------------------------------------- startup

Result<StartupReport> StartupChecks(const RelayConfig& config, const StartupCheckOptions& options) {
  StartupReport report;
  auto warn = [&](std::string w) {
    spdlog::warn("startup check: {}", w);
    report.warnings.push_back(std::move(w));
  };
  const slot::ConnInfo conninfo = config.SourceConninfo();
  WALRELAY_ASSIGN_OR_RETURN(auto admin, slot::SlotAdmin::Connect(conninfo));
  // 0. the transport: events and credentials cross the network in the clear, or to a
  // server nobody verified
  if (std::string w = admin->TransportWarning(); !w.empty()) warn(std::move(w));

  // 1. server version and wal_level
  WALRELAY_ASSIGN_OR_RETURN(report.settings, admin->GetServerSettings());
  if (report.settings.server_version_num < kMinServerVersionNum) {
    return FailedPreconditionError(
        "PostgreSQL " + std::to_string(report.settings.server_version_num / 10000) +
        " is too old: walrelay needs PostgreSQL 14 or newer (pgoutput's 'messages' option for "
        "table-less events and heartbeats, wal_status/safe_wal_size for slot safety). Fix: "
        "upgrade the server");
  }
  WALRELAY_RETURN_IF_ERROR(slot::RequireLogicalWalLevel(report.settings));

  // 2. replication, tried rather than read from the role's attributes: managed services
  // grant it through role membership (Amazon RDS and Aurora: rds_replication, with
  // rolreplication false and no superuser), and a connection tried also meets
  // pg_hba.conf's replication lines. Refusals name each platform's fix (slot/pg_error.h).
  {
    auto probe = slot::ReplicationConnection::Connect(conninfo);
    Status tried = probe.ok() ? (*probe)->IdentifySystem().status() : probe.status();
    if (!tried.ok()) {
      return tried.WithContext("startup check: opening a replication connection as role \"" +
                               admin->user() + "\"");
    }
  }

  // 3. max_slot_wal_keep_size
  const int64_t keep = report.settings.max_slot_wal_keep_size_bytes;
  if (keep < 0) {
    warn(
        "max_slot_wal_keep_size = -1 (unlimited): while walrelay is stopped or stuck, its slot "
        "keeps every WAL segment and can fill the server's disk, which stops PostgreSQL for "
        "all applications. Fix: bound it above the longest relay outage you tolerate, e.g. "
        "ALTER SYSTEM SET max_slot_wal_keep_size = '16GB'; SELECT pg_reload_conf(); — past "
        "the bound the slot is invalidated (wal_status 'lost') instead of the disk filling "
        "up, and the outbox rows still in the table can be re-published");
    for (const Threshold* t : {&options.warn, &options.critical}) {
      if (t->kind == Threshold::Kind::kFraction) {
        warn("threshold " + t->ToString() +
             " does not apply while max_slot_wal_keep_size is unlimited; give it in bytes "
             "(e.g. 1GB) or bound max_slot_wal_keep_size");
      }
    }
  }

  // 4. the slot
  auto info = admin->GetSlot(config.slot);
  if (info.ok()) {
    report.slot = *info;
    if (info->invalidated()) {
      report.slot_lost = true;
      std::string msg =
          "replication slot \"" + config.slot + "\" is invalidated, " +
          slot::ExplainSlotInvalidation(info->invalidation_reason) +
          "; so changes after its confirmed_flush_lsn " +
          (info->confirmed_flush_lsn ? info->confirmed_flush_lsn->ToString() : "(unknown)") +
          " can no longer be streamed. Recovery: rows still in the outbox table must be "
          "re-published from the table (walrelay's lost-slot recovery does this), then the "
          "slot recreated: SELECT pg_drop_replication_slot(" +
          QuoteLiteral(config.slot) +
          "); and restart walrelay with create_slot on. Rows already deleted from the outbox "
          "cannot be recovered. Prevent it: alert on `walrelay lag` and size "
          "max_slot_wal_keep_size for your longest outage";
      if (options.lost_slot_is_error) {
        // The relay's --recovery-enabled false: Session::Recover's refusal.
        return RecoveryDisabledRefusal(
            config, "lost (" + slot::ExplainSlotInvalidation(info->invalidation_reason) + ")");
      }
      warn(msg);
    } else if (info->wal_status == "unreserved") {
      warn("replication slot \"" + config.slot +
           "\" has wal_status 'unreserved': it is past max_slot_wal_keep_size and the next "
           "checkpoint invalidates it unless walrelay catches up first");
    }
    if (info->slot_type != "logical" || (!info->plugin.empty() && info->plugin != config.plugin)) {
      return FailedPreconditionError(
          "replication slot \"" + config.slot + "\" is a " + info->slot_type + " slot" +
          (info->plugin.empty() ? "" : " with plugin " + info->plugin) +
          "; walrelay is configured for a logical " + config.plugin +
          " slot (source.plugin). Fix: set source.plugin to the slot's plugin, use another "
          "slot name, or drop it with SELECT pg_drop_replication_slot(" +
          QuoteLiteral(config.slot) + ") if nothing else uses it");
    }
  } else if (info.status().code() == StatusCode::kNotFound) {
    if (!config.create_slot) {
      return FailedPreconditionError(
          "replication slot \"" + config.slot +
          "\" does not exist and create_slot is off. Fix: turn create_slot on, or SELECT "
          "pg_create_logical_replication_slot(" +
          QuoteLiteral(config.slot) + ", " + QuoteLiteral(config.plugin) + ");");
    }
  } else {
    return info.status();
  }

  // 5. the publication covers the outbox tables, through the root of a partitioned one
  // (read-only; SlotAdmin::EnsurePublication would create it).
  if (!config.tables.empty()) {
    WALRELAY_ASSIGN_OR_RETURN(std::vector<slot::ResolvedTable> tables,
                              admin->ResolveTables(config.tables));
    WALRELAY_ASSIGN_OR_RETURN(slot::PublicationCheck check,
                              admin->CheckPublication(config.publication, tables));
    report.publication_exists = check.exists;
    WALRELAY_RETURN_IF_ERROR(check.Verdict(config.publication, config.create_slot));
    if (config.plugin == "wal2json" && !check.partitioned.empty()) {
      return FailedPreconditionError(
          "outbox table " + check.partitioned.front() +
          " is partitioned, and wal2json names every change by its partition (it has no "
          "publish_via_partition_root), so partitions attached later would be missed. Fix: "
          "use --source-plugin pgoutput for a partitioned outbox");
    }
  }
  return report;
}

}  // namespace walrelay::relay
