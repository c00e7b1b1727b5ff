// The metrics of `walrelay audit --every` (the sidecar, src/cli/audit.cc): the last
// completed run's findings. docker/alerts.yml uses them (MetricsDocsTest checks the names).
#pragma once

#include <string_view>

namespace walrelay::audit::metric_names {

inline constexpr std::string_view kMissing = "walrelay_audit_missing_events";
inline constexpr std::string_view kPhantom = "walrelay_audit_phantom_events";
inline constexpr std::string_view kOutOfOrder = "walrelay_audit_out_of_order_events";
inline constexpr std::string_view kTorn = "walrelay_audit_torn_transactions";
inline constexpr std::string_view kDuplicated = "walrelay_audit_duplicated_events";
inline constexpr std::string_view kDuplicatedBeyondInbox =
    "walrelay_audit_duplicated_beyond_inbox_retention_events";
inline constexpr std::string_view kLate = "walrelay_audit_late_events";
inline constexpr std::string_view kWindowRows = "walrelay_audit_window_rows";
inline constexpr std::string_view kWindowSeconds = "walrelay_audit_window_seconds";
inline constexpr std::string_view kLastRun = "walrelay_audit_last_run_timestamp_seconds";
inline constexpr std::string_view kRuns = "walrelay_audit_runs_total";
inline constexpr std::string_view kFailures = "walrelay_audit_failures_total";

}  // namespace walrelay::audit::metric_names
