#include "src/relay/run/startup_checks.h"

#include <spdlog/spdlog.h>

#include <thread>

#include "base/sql.h"
#include "slot/pg_error.h"
#include "slot/replication_connection.h"
#include "src/relay/core/privileges.h"
#include "src/relay/recovery/backfill.h"

namespace walrelay::relay {

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
    warn(std::string(kUnlimitedSlotWalWarning));
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

  // 5a. table privileges, before 5b reads the tables: a missing one failed later,
  // mid-session, as one "permission denied" at a time; all of them now, as the GRANTs to
  // run (relay/core/privileges.h).
  {
    WALRELAY_ASSIGN_OR_RETURN(
        slot::PgConnPtr conn,
        slot::ConnectPg(conninfo, nullptr, "startup check connection", slot::kRelaySession));
    WALRELAY_ASSIGN_OR_RETURN(std::vector<std::string> grants, MissingGrants(conn.get(), config));
    if (!grants.empty()) {
      std::string list;
      for (const std::string& g : grants) list += "\n  " + g;
      return PermissionDeniedError(
          "startup check: role \"" + std::string(PQuser(conn.get())) +
          "\" lacks privileges walrelay needs (nothing was read or confirmed). Fix, as the "
          "tables' owner:" + list +
          "\n(or run `walrelay setup --relay-role " + std::string(PQuser(conn.get())) +
          "` as the owner, which grants exactly these)");
    }
  }

  // 5b. the publication covers the outbox tables, through the root of a partitioned one
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

  // 6. failover readiness (PostgreSQL 17+), only where a standby streams from this server
  // through a physical slot: warnings, the relay runs either way.
  if (config.WantsFailoverSlot(report.settings.server_version_num)) {
    WALRELAY_ASSIGN_OR_RETURN(std::vector<slot::SlotInfo> all, admin->ListSlots());
    std::string physical;
    for (const slot::SlotInfo& s : all) {
      if (s.slot_type == "physical") physical += (physical.empty() ? "" : ",") + s.slot_name;
    }
    if (!physical.empty()) {
      if (report.slot && !report.slot->failover) {
        warn("replication slot \"" + config.slot +
             "\" is not a failover slot, so a standby does not keep it: after a failover to "
             "a standby, walrelay finds it gone and recovers from the outbox tables "
             "(duplicates; table-less events of the window are lost). Fix, on the primary: "
             "psql \"dbname=... replication=database\" -c 'ALTER_REPLICATION_SLOT " +
             config.slot +
             " (FAILOVER true)', and on each standby sync_replication_slots = on, "
             "hot_standby_feedback = on, primary_slot_name set and dbname in "
             "primary_conninfo (docs/operations.md, failover)");
      }
      if (report.settings.synchronized_standby_slots.empty()) {
        warn("synchronized_standby_slots is empty on this primary (physical slots: " +
             physical +
             "): walrelay may publish transactions a standby has not received yet, and if "
             "that standby is promoted after a crash those events are in Kafka but not in "
             "the new primary, and the promoted standby's copy of the slot may be confirmed "
             "past the progress record it holds (walrelay then recovers it: repeats and a "
             "lost-slot alert; measured by scripts/pg-failover-check.sh). Fix: ALTER SYSTEM "
             "SET synchronized_standby_slots = '<the standbys' physical slots>'; SELECT "
             "pg_reload_conf(); (docs/operations.md, failover)");
      }
    }
  }

  // 7. PostgreSQL 18+'s idle_replication_slot_timeout: while walrelay runs it reads the
  // slot, but a relay stopped (or every relay standing by) for longer loses it.
  if (const auto idle = report.settings.idle_replication_slot_timeout; idle.count() > 0) {
    warn("idle_replication_slot_timeout is " + std::to_string(idle.count()) +
         " s on this server: if no walrelay reads slot \"" + config.slot +
         "\" for longer (an outage, a long maintenance stop), the server invalidates it at "
         "its next checkpoint and walrelay runs lost-slot recovery (outbox rows republished "
         "from the recorded bound: repeats; table-less events of the gap are lost). Fix: "
         "ALTER SYSTEM SET idle_replication_slot_timeout = 0 (or longer than any stop you "
         "plan); SELECT pg_reload_conf(); (docs/operations.md, lost or missing slot)");
  }
  return report;
}

std::string CheckpointTopicMissing(const std::string& topic) {
  return "exactly-once: the checkpoint topic " + topic +
         " does not exist; nothing was published. Create it with `walrelay setup` (same "
         "options), or by hand: kafka-topics.sh --create --topic " + topic +
         " --partitions 1 --replication-factor 3 --config cleanup.policy=compact "
         "--config min.insync.replicas=2";
}

Status CheckCheckpointTopic(const kafka::Properties& properties, const std::string& topic,
                            std::chrono::milliseconds timeout) {
  auto described = kafka::DescribeTopic(properties, topic, timeout);
  // A topic created a moment ago may not be known to the broker asked yet.
  for (int i = 0; i < 5 && !described.ok() && described.status().code() == StatusCode::kNotFound;
       ++i) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    described = kafka::DescribeTopic(properties, topic, timeout);
  }
  if (!described.ok() && described.status().code() == StatusCode::kNotFound) {
    return FailedPreconditionError(CheckpointTopicMissing(topic));
  }
  if (!described.ok() && described.status().code() == StatusCode::kPermissionDenied) {
    spdlog::warn("exactly-once: cannot check the configs of checkpoint topic {} ({}); grant "
                 "walrelay's principal DescribeConfigs on it, or make sure it is compacted",
                 topic, described.status().message());
    return Status::Ok();
  }
  WALRELAY_RETURN_IF_ERROR(described.status().WithContext("exactly-once: checkpoint topic"));
  if (!described->configs_known) {
    spdlog::warn("exactly-once: the cluster did not describe the configs of checkpoint topic {} "
                 "within 5 s (the dev broker never does); it is not checked: make sure it is "
                 "compacted (cleanup.policy=compact)", topic);
    return Status::Ok();
  }
  const std::string policy = described->Config("cleanup.policy");
  if (policy.find("compact") == std::string::npos) {
    return FailedPreconditionError(
        "exactly-once: checkpoint topic " + topic + " has cleanup.policy=" + policy +
        ": its checkpoints would be deleted by age, and a relay that then starts republishes "
        "what the slot had not confirmed (duplicates). Nothing was published. Fix: "
        "kafka-configs.sh --alter --entity-type topics --entity-name " + topic +
        " --add-config cleanup.policy=compact");
  }
  if (policy.find("delete") != std::string::npos) {
    spdlog::warn("exactly-once: checkpoint topic {} has cleanup.policy={}: a stream idle for "
                 "longer than its retention.ms loses its checkpoint; cleanup.policy=compact "
                 "alone keeps it", topic, policy);
  }
  return Status::Ok();
}


}  // namespace walrelay::relay
