#include "src/relay/lifecycle/slot_guard.h"

#include <spdlog/spdlog.h>

#include "slot/pg_error.h"
#include "src/relay/core/metric_names.h"

namespace walrelay::relay {
namespace {

namespace mn = metric_names;

std::string Opt(const std::optional<uint64_t>& b) { return b ? FormatBytes(*b) : "n/a"; }

}  // namespace

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

}  // namespace walrelay::relay
