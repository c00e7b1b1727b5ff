// The checks `walrelay run` makes once before it streams: server version, wal_level,
// privileges, max_slot_wal_keep_size, the slot and the publication, each failure with its
// fix. The slot guard (lifecycle/slot_guard.h) watches the same slot while the relay runs.
//
// Thread safety: reentrant; each call opens its own short-lived connections.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "slot/slot_admin.h"
#include "src/kafka/topic_admin.h"
#include "src/relay/core/config.h"
#include "src/relay/core/thresholds.h"

namespace walrelay::relay {

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
//   5a. the role's table privileges            any missing: kPermissionDenied with every
//      (relay/core/privileges.h)                GRANT to run (USAGE on schemas first)
//   5b. the publication covers config.tables   missing table: kNotFound; a partition
//      (resolved as SQL does, by OID)           or not a table, a table not in the
//                                               publication, a partitioned table without
//                                               publish_via_partition_root, no
//                                               publication and create_slot off, or
//                                               wal2json with a partitioned table:
//                                               kFailedPrecondition
//   6. PostgreSQL 17+ with source.slot_failover, where physical slots exist (a standby):
//      the slot is not a failover slot, or      a warning each, with the fix
//      synchronized_standby_slots is empty
//   7. PostgreSQL 18+ with idle_replication_slot_timeout > 0: a warning with what a stop
//      longer than it costs and the fix
// Read-only: nothing is created or altered. Opens its own short-lived connections to
// `config.source_dsn`. kUnavailable when the server cannot be reached.
Result<StartupReport> StartupChecks(const RelayConfig& config,
                                    const StartupCheckOptions& options = {});

// Exactly-once mode (config.exactly_once), before the first session and by every session:
// the checkpoint topic exists (else kFailedPrecondition, with `walrelay setup` and the
// kafka-topics.sh command as the fix) and is compacted (cleanup.policy without compact:
// kFailedPrecondition with the kafka-configs.sh fix; its checkpoints would be deleted by
// age, and the next start would republish what the slot had not confirmed). Configs that
// cannot be read (the dev broker; no DescribeConfigs ACL) are logged, not refused.
// kUnavailable when the cluster does not answer. `properties`: the cluster's librdkafka
// properties.
Status CheckCheckpointTopic(const kafka::Properties& properties, const std::string& topic,
                            std::chrono::milliseconds timeout);
// The refusal for a missing checkpoint topic, with the fix.
std::string CheckpointTopicMissing(const std::string& topic);

}  // namespace walrelay::relay
