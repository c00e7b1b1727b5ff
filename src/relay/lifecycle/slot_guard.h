// Slot-lag safety: the slot guard and its evaluation of a slot against the thresholds
// (core/thresholds.h). The checks before streaming are run/startup_checks.h.
//
// Why. A logical slot that nobody reads makes PostgreSQL keep WAL until the disk is full,
// which stops the database: worse than a late event. The guard measures, on a NORMAL
// (non-replication) connection, what the slot holds:
//   retained bytes  = pg_current_wal_lsn() − restart_lsn          (WAL kept on disk)
//   confirmed lag   = pg_current_wal_lsn() − confirmed_flush_lsn  (not yet confirmed)
//   wal_status, safe_wal_size                                     (the server's own view)
// and classifies the slot (EvaluateSlot) as
//   ok        below the warn threshold
//   warn      retained >= warn threshold
//   critical  retained >= critical threshold, or wal_status = 'unreserved' (the next
//             checkpoint removes WAL the slot needs)
//   lost      wal_status = 'lost': the slot was invalidated; it cannot stream again
//   missing   no such slot
// Thresholds compare RETAINED bytes (what fills the disk and what max_slot_wal_keep_size
// bounds); for a slot without restart_lsn the confirmed lag is used.
//
// The same evaluation drives `walrelay lag` (src/cli/lag.cc), so the operator's check and
// the relay agree.
//
// Thread safety: free functions are reentrant. SlotGuard: see the class comment.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/status.h"
#include "slot/slot_admin.h"
#include "src/metrics/registry.h"
#include "src/relay/core/config.h"
#include "src/relay/core/thresholds.h"
#include "src/relay/lifecycle/periodic.h"

namespace walrelay::relay {

enum class SlotState { kOk = 0, kWarn = 1, kCritical = 2, kLost = 3, kMissing = 4 };
std::string_view SlotStateName(SlotState s);  // "ok", "warn", "critical", "lost", "missing"
// The check severity of a state: 0 ok, 1 warn, 2 critical/lost/missing.
int SlotStateSeverity(SlotState s);

struct SlotEvaluation {
  SlotState state = SlotState::kOk;
  std::optional<uint64_t> measured_bytes;  // retained (or confirmed lag) compared
  std::optional<uint64_t> warn_bytes;      // resolved thresholds
  std::optional<uint64_t> critical_bytes;
  std::string reason;  // one sentence: why this state
};

SlotEvaluation EvaluateSlot(const slot::SlotInfo& slot, int64_t max_slot_wal_keep_size_bytes,
                            const Threshold& warn, const Threshold& critical);

struct SlotGuardOptions {
  slot::ConnInfo conninfo;  // the source (replication is forced off)
  std::string slot = "walrelay";
  Threshold warn = Threshold::Bytes(1ull << 30);      // 1 GB retained
  Threshold critical = Threshold::Bytes(8ull << 30);  // 8 GB retained
  std::chrono::milliseconds interval{10000};          // Start(): time between polls
  // Optional: gauges and counters named in src/relay/core/metric_names.h, label slot=<slot>.
  metrics::Registry* registry = nullptr;
  // Optional: called after every state change (on the polling thread), e.g. to start
  // lost-slot recovery. `slot` is null when the slot is missing.
  std::function<void(SlotState from, SlotState to, const slot::SlotInfo* slot)> on_change;
};

// SlotGuard polls SlotAdmin::GetSlot and GetServerSettings, keeps the last evaluation,
// logs one line (spdlog) on every state change — info for ok, warn for warn, error for
// critical and missing, critical for lost — and updates its metrics on every poll.
//
// Two ways to drive it (pick one per object):
//   * Start(): a thread of its own polls every `interval` until Stop() (or destruction).
//   * Poll(): one synchronous round, for callers with their own scheduler (and tests).
// A failed poll (server down, query error) keeps the previous state, counts an error,
// logs at warn level once per failure streak, and is retried at the next poll with a new
// connection.
//
// Thread safety: state(), last() and last_error() from any thread. Poll() is serialized
// internally. Start()/Stop() from one thread.
class SlotGuard {
 public:
  explicit SlotGuard(SlotGuardOptions options);
  ~SlotGuard();
  SlotGuard(const SlotGuard&) = delete;
  SlotGuard& operator=(const SlotGuard&) = delete;

  // One poll round. Returns the new state, or the error of a failed poll (the state is
  // then unchanged).
  Result<SlotState> Poll();

  void Start();
  void Stop();  // idempotent; joins the thread

  // kOk until the first successful poll.
  SlotState state() const { return state_.load(std::memory_order_relaxed); }
  // The last successful poll: the slot row (nullopt if missing) and its evaluation.
  struct Snapshot {
    std::optional<slot::SlotInfo> slot;
    slot::ServerSettings settings;
    SlotEvaluation evaluation;
    std::chrono::system_clock::time_point at;
  };
  std::optional<Snapshot> last() const;
  Status last_error() const;

  const SlotGuardOptions& options() const { return options_; }

 private:
  void Export(const Snapshot& snap);

  SlotGuardOptions options_;
  std::atomic<SlotState> state_{SlotState::kOk};
  bool have_state_ = false;  // guarded by poll_mu_

  std::mutex poll_mu_;  // serializes Poll(); owns admin_
  std::unique_ptr<slot::SlotAdmin> admin_;
  bool failing_ = false;

  mutable std::mutex mu_;  // guards last_, last_error_
  std::optional<Snapshot> last_;
  Status last_error_;

  PeriodicThread periodic_;

  // Metrics (null without a registry).
  metrics::Gauge* retained_ = nullptr;
  metrics::Gauge* confirmed_lag_ = nullptr;
  metrics::Gauge* safe_wal_size_ = nullptr;
  metrics::Gauge* active_ = nullptr;
  metrics::Gauge* warn_threshold_ = nullptr;
  metrics::Gauge* critical_threshold_ = nullptr;
  metrics::Gauge* max_keep_ = nullptr;
  metrics::Gauge* last_success_ = nullptr;
  metrics::Counter* polls_ = nullptr;
  metrics::Counter* errors_ = nullptr;
  std::vector<std::pair<std::string, metrics::Gauge*>> wal_status_;
  std::vector<std::pair<SlotState, metrics::Gauge*>> state_gauges_;
};

}  // namespace walrelay::relay
