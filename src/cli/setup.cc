#include "src/cli/setup.h"

#include <algorithm>
#include <iostream>
#include <set>

#include "slot/pg_error.h"
#include "src/kafka/topic_admin.h"
#include "slot/server_version.h"
#include "slot/slot_admin.h"
#include "src/relay/lifecycle/partitions.h"
#include "src/relay/core/privileges.h"
#include "src/relay/core/progress.h"
#include "src/relay/core/thresholds.h"
#include "src/relay/core/schema.h"

namespace walrelay::cli {
std::vector<std::string> SetupStatements(const relay::RelayConfig& config, bool create_tables,
                                         const std::set<std::string>& partitioned_tables,
                                         const std::set<std::string>& audit_index_tables) {
  auto partitioned = [&](const std::string& t) {
    return partitioned_tables.contains(t) ||
           (create_tables && config.outbox_cleanup == relay::OutboxCleanup::kPartitions);
  };
  std::vector<std::string> sql;
  if (create_tables) {
    for (const auto& t : config.tables) {
      auto name = ParseQualifiedName(t);  // validated with the configuration
      if (name.ok() && !name->schema.empty() && name->schema != "public") {
        sql.push_back("CREATE SCHEMA IF NOT EXISTS " + QuoteIdentifier(name->schema));
      }
      if (config.outbox_cleanup == relay::OutboxCleanup::kPartitions) {
        // Partitions are dropped whole: no dead tuples, no autovacuum settings to tune.
        sql.push_back(relay::PartitionedOutboxTableDdl(t));
        for (const relay::PartitionRange& r :
             relay::PartitionRanges(t, config.partition_period, std::chrono::system_clock::now(),
                                    relay::PartitionsAhead(config.partition_period))) {
          sql.push_back(relay::CreatePartitionSql(t, r));
        }
      } else {
        sql.push_back(relay::OutboxTableDdl(t));
        sql.push_back(relay::QueueTableStorageSql(t));
      }
    }
  }
  if (!config.columns.created_at.empty()) {
    for (const auto& t : config.tables) {
      if (audit_index_tables.contains(t) && !partitioned(t)) {
        sql.push_back(relay::AuditIndexSql(t, config.columns.created_at));
      }
    }
  }
  sql.push_back(relay::DeadLetterTableDdl(QuoteQualifiedName(config.dead_letter_table)));
  sql.push_back(relay::DeadLetterTableUpgradeSql(QuoteQualifiedName(config.dead_letter_table)));
  sql.push_back(relay::ProgressTableDdl(QuoteQualifiedName(config.progress_table)));
  sql.push_back(relay::ProgressTableUpgradeSql(QuoteQualifiedName(config.progress_table)));
  if (config.source_mode == relay::SourceMode::kPoll) {
    // No publication, no slot: the polling publisher's columns and index instead. Rows
    // that WAL mode delivered (before the slot's recorded bound) count as published, so
    // the switch from WAL mode repeats only the last moments (docs/poll-mode.md). Only in
    // a table of the publication the WAL relay streamed: another deployment with the same
    // slot name (the default) has a progress row of its own, whose bound says nothing of
    // this table. The table is matched by OID (invariant 8), as the publication lists it
    // (its partition root with publish_via_partition_root, FOR ALL TABLES and schemas too).
    for (const auto& t : config.tables) {
      sql.push_back(relay::PollColumnsSql(t));
      sql.push_back(relay::PollIndexSql(t, config.columns.id, partitioned(t)));
      sql.push_back(relay::PollWaitingIndexSql(t, config.columns.aggregate_id, config.columns.id,
                                               partitioned(t)));
      sql.push_back("UPDATE " + QuoteQualifiedName(t) +
                    " SET published_at = now() WHERE published_at IS NULL AND EXISTS (SELECT 1 "
                    "FROM pg_publication_tables pt JOIN pg_namespace n ON n.nspname = "
                    "pt.schemaname JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = "
                    "pt.tablename WHERE pt.pubname = " +
                    QuoteLiteral(config.publication) + " AND c.oid = " +
                    QuoteLiteral(QuoteQualifiedName(t)) + "::regclass) AND " +
                    relay::DeliveredBeforeBoundPredicate(config.progress_table, config.slot));
    }
    return sql;
  }
  if (!config.tables.empty()) {
    std::string list;
    for (const auto& t : config.tables) {
      if (!list.empty()) list += ", ";
      list += QuoteQualifiedName(t);
    }
    // The publication before the slot: pgoutput reads the publication as of the slot's
    // position, so a slot made first would not see it for earlier WAL.
    sql.push_back("DO $$ BEGIN\n  IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = " +
                  QuoteLiteral(config.publication) + ") THEN\n    CREATE PUBLICATION " +
                  QuoteIdentifier(config.publication) + " FOR TABLE " + list +
                  " WITH (publish_via_partition_root = true);\n  END IF;\nEND $$");
  }
  if (!config.create_slot) return sql;  // RunSetup says how the slot will come
  // Never where walrelay has streamed the slot before (its progress row exists): a slot
  // made now would start now, and every event committed since the old one was lost or
  // dropped would be skipped without a word. `walrelay run` recovers it (invariant 11).
  // On PostgreSQL 17+ with source.slot_failover, a failover slot (the five-argument form,
  // which older servers do not have: PL/pgSQL resolves it only where it runs).
  const std::string args = QuoteLiteral(config.slot) + ", " + QuoteLiteral(config.plugin);
  const std::string unless_known =
      "NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = " +
      QuoteLiteral(config.slot) + ") AND NOT EXISTS (SELECT 1 FROM " +
      QuoteQualifiedName(config.progress_table) + " WHERE slot = " + QuoteLiteral(config.slot) +
      ")";
  if (!config.slot_failover) {
    sql.push_back("SELECT pg_create_logical_replication_slot(" + args + ") WHERE " +
                  unless_known);
  } else {
    sql.push_back("DO $$ BEGIN\n  IF " + unless_known +
                  " THEN\n    IF current_setting('server_version_num')::int >= " +
                  std::to_string(slot::kPgVersionFailoverSlots) + " THEN\n"
                  "      PERFORM pg_create_logical_replication_slot(" + args +
                  ", false, false, true);\n    ELSE\n"
                  "      PERFORM pg_create_logical_replication_slot(" + args +
                  ");\n    END IF;\n  END IF;\nEND $$");
  }
  return sql;
}

namespace {

// The pg_class relkind of `relation` (SQL text, quoted as needed): 'r', 'p', ...; '\0'
// when it does not exist.
Result<char> RelationKind(PGconn* conn, const std::string& relation) {
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgResultPtr r,
      slot::ExecPg(conn, "SELECT relkind FROM pg_class WHERE oid = to_regclass($1)",
                   {relation.c_str()}, "setup: looking up table " + relation));
  return PQntuples(r.get()) == 1 ? PQgetvalue(r.get(), 0, 0)[0] : '\0';
}

// Tables that look like outbox tables (they have the aggregate id column), for the
// "did you mean" of a configured table that does not exist.
Result<std::vector<std::string>> OutboxLikeTables(PGconn* conn, const std::string& column) {
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgResultPtr r,
      slot::ExecPg(conn,
                   "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN "
                   "pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') AND "
                   "NOT c.relispartition AND n.nspname NOT IN ('pg_catalog', "
                   "'information_schema') AND EXISTS (SELECT 1 FROM pg_attribute a WHERE "
                   "a.attrelid = c.oid AND a.attname = $1 AND NOT a.attisdropped) ORDER BY 1 "
                   "LIMIT 5",
                   {column.c_str()}, "setup: listing outbox-like tables"));
  std::vector<std::string> names;
  for (int i = 0; i < PQntuples(r.get()); ++i) names.emplace_back(PQgetvalue(r.get(), i, 0));
  return names;
}

const char* Outcome(bool existed) { return existed ? "existed" : "created"; }

// Exactly-once mode's checkpoint topic: one partition (its records are a few per second,
// one key per stream), compacted (a checkpoint is never deleted by age), replicated like
// the events (3, or every broker of a smaller cluster; min.insync.replicas one less, at
// least 1). An existing topic is checked as `walrelay run` checks it, not changed.
Status SetUpCheckpointTopic(const relay::RelayConfig& config) {
  constexpr std::chrono::seconds kTimeout{30};
  const std::string& topic = config.checkpoint_topic;
  if (config.embedded_kafka) {
    std::cerr << "checkpoint topic " << topic
              << ": not created (no --kafka-bootstrap-servers; an embedded or dev cluster makes "
                 "it when first written)\n";
    return Status::Ok();
  }
  kafka::Properties properties{{"bootstrap.servers", config.bootstrap_servers}};
  for (const auto& [k, v] : config.kafka_properties) properties.emplace_back(k, v);
  auto existing = kafka::DescribeTopic(properties, topic, kTimeout);
  if (existing.ok()) {
    const std::string policy = existing->Config("cleanup.policy");
    if (existing->configs_known && policy.find("compact") == std::string::npos) {
      return FailedPreconditionError(
          "checkpoint topic " + topic + " exists with cleanup.policy=" + policy +
          ", which deletes checkpoints by age (--kafka-exactly-once needs it compacted; setup "
          "changes no existing topic). Fix: kafka-configs.sh --alter --entity-type topics "
          "--entity-name " + topic + " --add-config cleanup.policy=compact");
    }
    std::cerr << "checkpoint topic " << topic << ": existed ("
              << existing->partitions << " partition(s), replication factor "
              << existing->replication_factor
              << (existing->configs_known ? ", cleanup.policy=" + policy : std::string())
              << ")\n";
    return Status::Ok();
  }
  if (existing.status().code() != StatusCode::kNotFound) {
    return existing.status().WithContext("setup: checkpoint topic " + topic);
  }
  kafka::TopicSpec spec;
  spec.name = topic;
  spec.partitions = 1;
  spec.replication_factor = 3;
  // Metadata of a missing topic still counts the brokers.
  auto cluster = kafka::DescribeTopic(properties, "__consumer_offsets", kTimeout);
  if (cluster.ok() && cluster->brokers > 0 && cluster->brokers < 3) {
    spec.replication_factor = cluster->brokers;
  }
  spec.configs = {{"cleanup.policy", "compact"},
                  {"min.insync.replicas", std::to_string(std::max(1, spec.replication_factor - 1))}};
  auto created = kafka::CreateTopic(properties, spec, kTimeout);
  if (!created.ok() && created.status().code() == StatusCode::kFailedPrecondition) {
    std::cerr << "checkpoint topic " << topic << ": not created: the cluster does not serve "
              << "CreateTopics (" << created.status().message()
              << "); a dev broker makes it when first written\n";
    return Status::Ok();
  }
  if (!created.ok()) {
    return created.status().WithContext(
        "setup: creating checkpoint topic " + topic +
        " (or create it yourself: kafka-topics.sh --create --topic " + topic +
        " --partitions 1 --replication-factor 3 --config cleanup.policy=compact --config "
        "min.insync.replicas=2)");
  }
  std::cerr << "checkpoint topic " << topic << ": " << (*created ? "created" : "existed")
            << " (1 partition, replication factor " << spec.replication_factor
            << ", cleanup.policy=compact)\n";
  return Status::Ok();
}

}  // namespace

Status RunSetup(const relay::RelayConfig& config, bool create_tables, bool dry_run,
                const std::string& relay_role, bool audit_index) {
  std::vector<relay::Privilege> grants;
  if (!relay_role.empty()) grants = relay::RelayPrivileges(config);
  if (dry_run) {
    std::set<std::string> indexed;
    if (create_tables || audit_index) indexed.insert(config.tables.begin(), config.tables.end());
    const auto statements = SetupStatements(config, create_tables, {}, indexed);
    for (const auto& s : statements) std::cout << s << ";\n\n";
    for (const auto& g : grants) std::cout << "-- " << g.why << "\n" << g.GrantTo(relay_role) << ";\n\n";
    if (config.exactly_once) {
      std::cout << "-- Kafka, --kafka-exactly-once: the checkpoint topic (replication factor: 3, "
                   "or the cluster's brokers if fewer)\n-- kafka-topics.sh --create --topic "
                << config.checkpoint_topic
                << " --partitions 1 --replication-factor 3 --config cleanup.policy=compact "
                   "--config min.insync.replicas=2\n";
    }
    return Status::Ok();
  }
  const slot::ConnInfo conninfo = config.SourceConninfo();
  const bool poll = config.source_mode == relay::SourceMode::kPoll;
  WALRELAY_ASSIGN_OR_RETURN(auto admin, slot::SlotAdmin::Connect(conninfo));
  WALRELAY_ASSIGN_OR_RETURN(slot::ServerSettings settings, admin->GetServerSettings());
  if (!poll) WALRELAY_RETURN_IF_ERROR(slot::RequireLogicalWalLevel(settings));
  if (!poll && settings.max_slot_wal_keep_size_bytes < 0) {
    std::cerr << "warning: " << relay::kUnlimitedSlotWalWarning << "\n";
  }
  WALRELAY_ASSIGN_OR_RETURN(
      slot::PgConnPtr conn,
      slot::ConnectPg(conninfo, nullptr, "setup connection", slot::kRelaySession));
  // The server's notices ("relation ... already exists, skipping") are what the outcome
  // lines below say once per object.
  PQsetNoticeProcessor(conn.get(), [](void*, const char*) {}, nullptr);

  // Whether a role may create and stream replication slots: a role attribute (or RDS's
  // role), which no GRANT gives. No row: no such role.
  auto replicates = [&](const std::string& role) -> Result<slot::PgResultPtr> {
    return slot::ExecPg(conn.get(),
                        "SELECT rolreplication OR rolsuper OR EXISTS (SELECT 1 FROM pg_roles m "
                        "WHERE m.rolname = 'rds_replication' AND pg_has_role(r.oid, m.oid, "
                        "'member')) FROM pg_roles r WHERE r.rolname = $1",
                        {role.c_str()}, "setup: looking up role " + role);
  };
  // The role running setup: the tables' owner, which often has no REPLICATION in the
  // two-role deployment (README); then the slot is left to the relay role.
  const std::string setup_role = PQuser(conn.get());
  bool setup_role_replicates = true;
  if (!poll && config.create_slot) {
    WALRELAY_ASSIGN_OR_RETURN(slot::PgResultPtr r, replicates(setup_role));
    setup_role_replicates =
        PQntuples(r.get()) == 1 && std::string_view(PQgetvalue(r.get(), 0, 0)) == "t";
  }

  // The relay role, before anything is made: it must exist.
  bool relay_role_replicates = true;
  if (!relay_role.empty()) {
    WALRELAY_ASSIGN_OR_RETURN(slot::PgResultPtr r, replicates(relay_role));
    if (PQntuples(r.get()) == 0) {
      return InvalidArgumentError(
          "--relay-role " + relay_role + ": no such role (nothing was created). Fix: create it "
          "first, e.g. CREATE ROLE " + QuoteIdentifier(relay_role) +
          " LOGIN REPLICATION PASSWORD '...'; (docs/operations.md, least privilege)");
    }
    relay_role_replicates = std::string_view(PQgetvalue(r.get(), 0, 0)) == "t";
  }

  // What exists before: an outbox table is created only when asked (--create-tables), so a
  // misspelled name is refused before anything is made, instead of an empty table, a
  // publication and a slot that would stream nothing of the real one.
  std::vector<bool> table_existed;
  std::vector<std::string> missing;
  // Outbox tables that exist and are partitioned (the user's own): their poll indexes
  // cannot be built concurrently.
  std::set<std::string> partitioned;
  for (const auto& t : config.tables) {
    WALRELAY_ASSIGN_OR_RETURN(char kind, RelationKind(conn.get(), QuoteQualifiedName(t)));
    table_existed.push_back(kind != '\0');
    if (kind == '\0') missing.push_back(t);
    if (kind == 'p') partitioned.insert(t);
  }
  if (!missing.empty() && !create_tables) {
    std::string list;
    for (const auto& t : missing) list += (list.empty() ? "" : ", ") + t;
    WALRELAY_ASSIGN_OR_RETURN(std::vector<std::string> like,
                              OutboxLikeTables(conn.get(), config.columns.aggregate_id));
    std::string hint;
    for (const auto& t : like) hint += (hint.empty() ? "" : ", ") + t;
    return InvalidArgumentError(
        "outbox table " + list + " does not exist, and setup creates outbox tables only "
        "when asked; nothing was created. " +
        (hint.empty() ? std::string("No table here has a column ") + config.columns.aggregate_id +
                            ". "
                      : "Tables here with a column " + config.columns.aggregate_id + ": " +
                            hint + " (did you mean one of them?). ") +
        "Fix: name the existing table (--source-table / source.tables), or create it: "
        "`walrelay setup --create-tables` (the documented schema) or your own migration");
  }
  WALRELAY_ASSIGN_OR_RETURN(char dead_letters_kind,
                            RelationKind(conn.get(), QuoteQualifiedName(config.dead_letter_table)));
  WALRELAY_ASSIGN_OR_RETURN(char progress_kind,
                            RelationKind(conn.get(), QuoteQualifiedName(config.progress_table)));
  const bool dead_letters_existed = dead_letters_kind != '\0';
  const bool progress_existed = progress_kind != '\0';
  bool publication_existed = false;
  if (!poll && !config.tables.empty()) {
    WALRELAY_ASSIGN_OR_RETURN(
        slot::PgResultPtr r,
        slot::ExecPg(conn.get(), "SELECT 1 FROM pg_publication WHERE pubname = $1",
                     {config.publication.c_str()}, "setup: looking up the publication"));
    publication_existed = PQntuples(r.get()) == 1;
  }
  const bool slot_existed = admin->GetSlot(config.slot).ok();

  relay::RelayConfig statements_config = config;
  if (!setup_role_replicates) statements_config.create_slot = false;  // said below
  std::set<std::string> indexed;  // the tables created now, or every one with --audit-index
  for (size_t i = 0; i < config.tables.size(); ++i) {
    if (audit_index || !table_existed[i]) indexed.insert(config.tables[i]);
  }
  const auto statements = SetupStatements(statements_config, create_tables, partitioned, indexed);
  for (const auto& s : statements) {
    WALRELAY_RETURN_IF_ERROR(slot::ExecPg(conn.get(), s, {}, "setup failed at:\n" + s).status());
  }
  // One line per object, with its outcome.
  for (size_t i = 0; i < config.tables.size(); ++i) {
    std::cerr << "outbox table " << config.tables[i] << ": "
              << (table_existed[i] ? "existed" : "created (--create-tables)")
              << (poll ? ", poll columns and indexes ensured" : "")
              << (indexed.contains(config.tables[i]) && !partitioned.contains(config.tables[i]) &&
                          config.outbox_cleanup != relay::OutboxCleanup::kPartitions &&
                          !config.columns.created_at.empty()
                      ? ", created_at index for walrelay audit ensured"
                      : "")
              << "\n";
  }
  std::cerr << "dead-letter table " << config.dead_letter_table << ": "
            << Outcome(dead_letters_existed) << "\n";
  std::cerr << "progress table " << config.progress_table << ": " << Outcome(progress_existed)
            << "\n";
  for (const relay::Privilege& g : grants) {
    const std::string sql = g.GrantTo(relay_role);
    WALRELAY_RETURN_IF_ERROR(slot::ExecPg(conn.get(), sql, {}, "setup failed at:\n" + sql).status());
    std::cerr << "relay role " << relay_role << ": granted " << g.privileges << " on "
              << (g.schema ? "schema " : "") << g.object << "\n";
  }
  if (!relay_role.empty() && !poll && !relay_role_replicates) {
    std::cerr << "warning: relay role " << relay_role
              << " has no REPLICATION, which streaming the slot needs (a role attribute, not "
                 "a GRANT setup can give). Fix, as a superuser: ALTER ROLE "
              << QuoteIdentifier(relay_role)
              << " REPLICATION; (Amazon RDS, Aurora: GRANT rds_replication TO "
              << QuoteIdentifier(relay_role) << ";)\n";
  }
  if (poll) {
    if (slot_existed) {
      std::cerr << "warning: replication slot " << config.slot
                << " still exists: nothing reads it in poll mode, so it keeps WAL until the "
                   "disk fills (or max_slot_wal_keep_size invalidates it). Once the WAL relay "
                   "is stopped for good, drop it: SELECT pg_drop_replication_slot("
                << QuoteLiteral(config.slot) << ");\n";
    }
    std::cerr << "setup complete for poll mode (no publication, no slot)\n";
    return Status::Ok();
  }
  // Checks an existing publication (it publishes inserts of every table, whole).
  WALRELAY_RETURN_IF_ERROR(admin->EnsurePublication(config.publication, config.tables).status());
  std::cerr << "publication " << config.publication << ": "
            << (publication_existed ? "existed, checked: publishes every outbox table's inserts, "
                                      "whole"
                                    : "created")
            << "\n";
  std::cerr << "slot " << config.slot << ": ";
  bool slot_left = false;  // a slot setup could not make: the next step names it
  if (slot_existed) {
    std::cerr << "existed\n";
  } else if (!setup_role_replicates) {
    slot_left = true;
    const std::string who = relay_role.empty() ? std::string("a role with REPLICATION")
                                               : "the relay role " + relay_role;
    std::cerr << "not created: role " << setup_role
              << " may not create replication slots (no REPLICATION; "
              << (relay_role.empty() || relay_role_replicates ? who + " may" : who + " may not either")
              << "). Create it before your services write events, as " << who
              << ": SELECT pg_create_logical_replication_slot(" << QuoteLiteral(config.slot)
              << ", " << QuoteLiteral(config.plugin)
              << "); or let the first `walrelay run` create it. Events committed before the "
                 "slot exists are not in it, so they are never published\n";
  } else if (!config.create_slot) {
    std::cerr << "not created (source.create_slot = false): create it yourself before walrelay "
                 "run starts, e.g. SELECT pg_create_logical_replication_slot("
              << QuoteLiteral(config.slot) << ", " << QuoteLiteral(config.plugin)
              << "); events committed before the slot exists are not in it\n";
  } else if (admin->GetSlot(config.slot).status().code() == StatusCode::kNotFound) {
    std::cerr << "NOT created: walrelay has streamed it before (" << config.progress_table
              << " has its progress), so it was dropped or lost since. A slot made now would "
                 "start now and skip, without a word, every event committed since then. "
                 "`walrelay run` recovers it (it makes the slot anew and republishes the "
                 "outbox rows after the recorded bound; duplicates, nothing lost), or refuses "
                 "with exit code 3 when --recovery-enabled is false (docs/operations.md, lost "
                 "slot)\n";
  } else {
    std::cerr << "created (" << config.plugin << ")\n";
  }
  if (config.exactly_once) WALRELAY_RETURN_IF_ERROR(SetUpCheckpointTopic(config));
  std::cerr << (slot_left ? "setup complete but for the slot (above)\n" : "setup complete\n");
  return Status::Ok();
}

}  // namespace walrelay::cli
