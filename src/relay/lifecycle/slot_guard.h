// Slot-lag safety: the slot guard, the thresholds it applies, and the startup checks.
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
#include "src/relay/lifecycle/periodic.h"
#include "src/relay/core/config.h"

namespace walrelay::relay {

// "512MB", "1.5GB", "64kB", "1048576" (bytes), "10 MB". Units are 1024-based as in
// PostgreSQL: B, kB/KB/KiB, MB/MiB, GB/GiB, TB/TiB (case-insensitive). kInvalidArgument
// on anything else.
Result<uint64_t> ParseByteSize(std::string_view text);
// Human units, 1024-based like pg_size_pretty: "812 B", "12.0 kB", "1.5 MB", "3.25 GB".
std::string FormatBytes(uint64_t bytes);

// A warn or critical threshold: absolute bytes, or a fraction of max_slot_wal_keep_size.
struct Threshold {
  enum class Kind { kNone, kBytes, kFraction };
  Kind kind = Kind::kNone;
  uint64_t bytes = 0;   // kBytes
  double fraction = 0;  // kFraction, in (0, 1]

  static Threshold None() { return {}; }
  static Threshold Bytes(uint64_t b) { return {Kind::kBytes, b, 0}; }
  static Threshold Fraction(double f) { return {Kind::kFraction, 0, f}; }

  // "" or "none" → kNone; "0.5" or "50%" → fraction (a number with a '.' and no unit must
  // be in (0, 1]); otherwise ParseByteSize ("512MB", "1073741824").
  static Result<Threshold> Parse(std::string_view text);

  // The threshold in bytes for a server whose max_slot_wal_keep_size is `max_keep_bytes`
  // (-1 = unlimited). nullopt for kNone, and for a fraction when unlimited (a fraction of
  // infinity does not apply; StartupChecks warns about it).
  std::optional<uint64_t> Resolve(int64_t max_keep_bytes) const;

  std::string ToString() const;  // "none", "512.0 MB", "0.5 of max_slot_wal_keep_size"
};

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
  // Optional: gauges and counters named in src/relay/metric_names.h, label slot=<slot>.
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

// --- Startup checks ------------------------------------------------------------------

// The oldest server walrelay runs against (server_version_num): PostgreSQL 14.
inline constexpr int kMinServerVersionNum = 140000;

struct StartupCheckOptions {
  // When true (the relay with --recovery-enabled false), a lost slot is an error
  // (kDataLoss: no retry can fix it); when false (the relay will recover it), it is a
  // warning and StartupReport::slot_lost is set.
  bool lost_slot_is_error = true;
  // Thresholds, only to warn when a fraction cannot apply (unlimited keep size).
  Threshold warn;
  Threshold critical;
};

struct StartupReport {
  std::vector<std::string> warnings;  // also logged with spdlog::warn
  slot::ServerSettings settings;
  std::optional<slot::SlotInfo> slot;  // nullopt: the slot does not exist (yet)
  bool slot_lost = false;
  bool publication_exists = false;
};

// Checks, in this order, before the relay streams (each failure message names the fix):
//   1. wal_level = logical                      else kFailedPrecondition
//   2. REPLICATION privilege of the role        else kPermissionDenied
//   3. max_slot_wal_keep_size = -1              a loud warning (disk-fill risk)
//   4. the slot: missing and create_slot off    kFailedPrecondition;
//                not logical, or its plugin is  kFailedPrecondition
//                not config.plugin
//                invalidated (wal_status 'lost' kDataLoss (or a warning, see
//                or invalidation_reason)
//                                               lost_slot_is_error); 'unreserved' warns
//   5. the publication covers config.tables     missing table: kNotFound; a partition
//      (resolved as SQL does, by OID)           or not a table, a table not in the
//                                               publication, a partitioned table without
//                                               publish_via_partition_root, no
//                                               publication and create_slot off, or
//                                               wal2json with a partitioned table:
//                                               kFailedPrecondition
// Read-only: nothing is created or altered. Opens its own short-lived connections to
// `config.source_dsn`. kUnavailable when the server cannot be reached.
Result<StartupReport> StartupChecks(const RelayConfig& config,
                                    const StartupCheckOptions& options = {});

}  // namespace walrelay::relay
