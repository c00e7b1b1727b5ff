// SQL of the objects walrelay works with, in one place: `walrelay setup`, the tests and the
// docs use these, so the documented schema and the code cannot drift apart.
#pragma once

#include <string>
#include <string_view>

#include "base/sql.h"

namespace walrelay::relay {

// The documented outbox table's columns after `id` (see OutboxColumns for the contract).
inline std::string OutboxColumnsDdl() {
  return "  event_id       uuid NOT NULL DEFAULT gen_random_uuid(),\n"
         "  aggregate_type text,\n"
         "  aggregate_id   text NOT NULL,\n"
         "  topic          text,\n"
         "  event_type     text NOT NULL,\n"
         "  payload        jsonb NOT NULL,\n"
         "  headers        jsonb,\n"
         "  created_at     timestamptz NOT NULL DEFAULT now()";
}

// The documented outbox table (see OutboxColumns for the column contract). Idempotent.
// REPLICA IDENTITY stays DEFAULT: only INSERTs publish, so old rows are never needed.
inline std::string OutboxTableDdl(std::string_view qualified_table) {
  return "CREATE TABLE IF NOT EXISTS " + QuoteQualifiedName(qualified_table) +
         " (\n"
         "  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n" +
         OutboxColumnsDdl() + "\n)";
}

// The documented outbox table range-partitioned on created_at (outbox.cleanup partitions,
// lifecycle/partitions.h): the primary key includes the partition key, as PostgreSQL requires; no
// partition is made here. Idempotent. Published through the root
// (publish_via_partition_root), so the relay sees one table.
inline std::string PartitionedOutboxTableDdl(std::string_view qualified_table) {
  return "CREATE TABLE IF NOT EXISTS " + QuoteQualifiedName(qualified_table) +
         " (\n"
         "  id             bigint GENERATED ALWAYS AS IDENTITY,\n" +
         OutboxColumnsDdl() + ",\n  PRIMARY KEY (id, created_at)\n) PARTITION BY RANGE (created_at)";
}

// Autovacuum settings for a queue table (docs/operations.md section 4): vacuum after a
// fixed number of dead (or inserted) rows instead of a fraction of a table that may be
// huge; rows are never updated, so fillfactor stays 100. `walrelay setup` applies them to
// the outbox tables it creates or finds. Storage parameters belong to tables that hold
// rows: on a partitioned outbox (PostgreSQL refuses them on the parent) they go to every
// leaf partition there is, through pg_partition_tree (a plain table gets them itself).
// One statement; REQUIRES: the table exists.
inline std::string QueueTableStorageSql(std::string_view qualified_table) {
  const std::string table = QuoteLiteral(QuoteQualifiedName(qualified_table)) + "::regclass";
  return "DO $walrelay$ DECLARE leaf regclass; BEGIN\n"
         "FOR leaf IN SELECT oid FROM pg_class WHERE oid = " + table + " AND relkind = 'r' "
         "UNION SELECT relid FROM pg_partition_tree(" + table + ") WHERE isleaf LOOP\n"
         "  EXECUTE format('ALTER TABLE %s SET (autovacuum_vacuum_scale_factor = 0, "
         "autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_insert_scale_factor = 0, "
         "autovacuum_vacuum_insert_threshold = 100000, autovacuum_vacuum_cost_delay = 0, "
         "fillfactor = 100)', leaf);\n"
         "END LOOP;\n"
         "END $walrelay$";
}

// The columns the polling publisher keeps its state in (polling/poller.h); PollColumnsSql
// adds them.
inline constexpr std::string_view kPublishedAtColumn = "published_at";
inline constexpr std::string_view kRetryCountColumn = "retry_count";
inline constexpr std::string_view kLastErrorColumn = "last_error";
inline constexpr std::string_view kRetryAtColumn = "retry_at";

// The polling publisher's state columns (polling/poller.h), added to an outbox table by `walrelay
// setup --source-mode poll`. Idempotent; existing rows count as unpublished.
inline std::string PollColumnsSql(std::string_view qualified_table) {
  return "ALTER TABLE " + QuoteQualifiedName(qualified_table) +
         " ADD COLUMN IF NOT EXISTS published_at timestamptz,"
         " ADD COLUMN IF NOT EXISTS retry_count int NOT NULL DEFAULT 0,"
         " ADD COLUMN IF NOT EXISTS last_error text,"
         " ADD COLUMN IF NOT EXISTS retry_at timestamptz";
}

// The partial indexes the poll reads: `<table>_unpublished` (only unpublished rows, in id
// order) and `<table>_waiting` (rows waiting for a retry, by aggregate: the poll holds back
// the later rows of their aggregates, polling/poller.h). Built without blocking writers
// (CONCURRENTLY) on a plain table; PostgreSQL cannot build an index concurrently on a
// partitioned table, so on one (`partitioned`) it is built on the parent and every
// partition in one statement, which blocks writes to the table while it builds: run setup
// on a partitioned outbox at a quiet moment. Idempotent; a failed concurrent build leaves
// an invalid index that the table health metrics report (drop it and run setup again).
inline std::string PollIndexName(std::string_view qualified_table, std::string_view suffix) {
  auto name = ParseQualifiedName(qualified_table);
  return (name.ok() ? name->name : std::string("outbox")) + std::string(suffix);
}
inline std::string PollIndexSql(std::string_view qualified_table, std::string_view id_column,
                                bool partitioned = false) {
  return std::string(partitioned ? "CREATE INDEX" : "CREATE INDEX CONCURRENTLY") +
         " IF NOT EXISTS " + QuoteIdentifier(PollIndexName(qualified_table, "_unpublished")) +
         " ON " + QuoteQualifiedName(qualified_table) + " (" + QuoteIdentifier(id_column) +
         ") WHERE published_at IS NULL";
}
inline std::string PollWaitingIndexSql(std::string_view qualified_table,
                                       std::string_view aggregate_id_column,
                                       std::string_view id_column, bool partitioned = false) {
  return std::string(partitioned ? "CREATE INDEX" : "CREATE INDEX CONCURRENTLY") +
         " IF NOT EXISTS " + QuoteIdentifier(PollIndexName(qualified_table, "_waiting")) + " ON " +
         QuoteQualifiedName(qualified_table) + " (" + QuoteIdentifier(aggregate_id_column) + ", " +
         QuoteIdentifier(id_column) + ") WHERE published_at IS NULL AND retry_at IS NOT NULL";
}

// The index `walrelay audit` reads its window through: `<table>_created_at` on the
// created_at column (the audit's reference set is the rows created in a time window;
// without it every audit run scans the whole table). Built without blocking writers
// (CONCURRENTLY) on a plain table; a table range-partitioned on created_at needs none
// (the window prunes partitions), so setup makes it only on plain tables: for the outbox
// tables it creates, and with `setup --audit-index` for existing ones (one more index for
// every insert to maintain: the operator's choice on a table of their own). Idempotent.
inline std::string AuditIndexSql(std::string_view qualified_table, std::string_view created_at_column) {
  return "CREATE INDEX CONCURRENTLY IF NOT EXISTS " +
         QuoteIdentifier(PollIndexName(qualified_table, "_created_at")) + " ON " +
         QuoteQualifiedName(qualified_table) + " (" + QuoteIdentifier(created_at_column) + ")";
}

// The dead-letter table (see dead_letter.h). `quoted_table` is already quoted. Created
// only when missing (slot::CreateTableIfMissing: a least-privilege role may lack CREATE on
// the schema); DeadLetterTableUpgradeSql brings a table of an earlier version up to date.
inline std::string DeadLetterTableDdl(std::string_view quoted_table) {
  return "CREATE TABLE IF NOT EXISTS " + std::string(quoted_table) +
         " (\n"
         "  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n"
         "  dead_at      timestamptz NOT NULL DEFAULT now(),\n"
         "  slot         text NOT NULL,\n"
         "  source       text NOT NULL,\n"
         "  recovered    boolean NOT NULL DEFAULT false,\n"
         "  commit_lsn   pg_lsn NOT NULL,\n"
         "  ordinal      int NOT NULL,\n"
         "  xid          bigint,\n"
         "  event_id     text,\n"
         "  aggregate_id text,\n"
         "  event_type   text,\n"
         "  topic        text,\n"
         "  reason       text NOT NULL,\n"
         "  payload      bytea,\n"
         "  redriven_at  timestamptz,\n"
         "  redrive_outcome text,\n"
         "  UNIQUE (slot, recovered, commit_lsn, ordinal)\n"
         ")";
}

// Upgrades a dead-letter table of an earlier version; does nothing (and needs no ownership)
// when it is current. (1) A text payload becomes bytea (any bytes must fit), the old
// payloads kept as their UTF-8 bytes. (2) Earlier versions keyed letters by (slot,
// commit_lsn, ordinal) alone, so a letter written by lost-slot recovery (commit_lsn = the
// new slot's consistent point) and one of a streamed event at that same LSN collided and
// ON CONFLICT DO NOTHING dropped the second: the key gains `recovered`. (3) The re-drive
// columns (`walrelay dead-letters retry`, commands/redrive.h) are added. One statement (a DO
// block); REQUIRES: the quoted name does not contain "$walrelay$".
inline std::string DeadLetterTableUpgradeSql(std::string_view quoted_table) {
  const std::string t(quoted_table);
  const std::string regclass = QuoteLiteral(t) + "::regclass";
  return "DO $walrelay$\n"
         "DECLARE c record;\n"
         "BEGIN\n"
         "IF (SELECT atttypid = 'text'::regtype FROM pg_attribute WHERE attrelid = " +
         regclass +
         " AND attname = 'payload' AND NOT attisdropped) THEN\n"
         "  ALTER TABLE " +
         t +
         " ALTER COLUMN payload TYPE bytea USING convert_to(payload, 'UTF8');\n"
         "END IF;\n"
         "IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = " +
         regclass +
         " AND attname = 'recovered' AND NOT attisdropped) THEN\n"
         "  ALTER TABLE " +
         t +
         " ADD COLUMN recovered boolean NOT NULL DEFAULT false;\n"
         "  FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = " +
         regclass +
         " AND contype = 'u' LOOP\n"
         "    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', " +
         regclass +
         ", c.conname);\n"
         "  END LOOP;\n"
         "  ALTER TABLE " +
         t +
         " ADD UNIQUE (slot, recovered, commit_lsn, ordinal);\n"
         "END IF;\n"
         "IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = " +
         regclass +
         " AND attname = 'redrive_outcome' AND NOT attisdropped) THEN\n"
         "  ALTER TABLE " +
         t +
         " ADD COLUMN redriven_at timestamptz, ADD COLUMN redrive_outcome text;\n"
         "END IF;\n"
         "END $walrelay$";
}

// Lost-slot recovery progress (progress.h): per slot, in the row with source '*', the
// recorded snapshot bound (`bound_snapshot`, taken when the WAL insert position was
// `bound_lsn`; every transaction visible in it was delivered), the `recovering` flag (set
// while a backfill, or a republish that makes the slot, is under way), the slot's trust
// (`delivered_lsn`: the relay confirms the slot no further than this position, recorded
// first, so a slot confirmed past it was not advanced by walrelay; `slot_origin`: how the
// slot the relay streams came to be) and `backfill_after_id` (the id up to which an
// unfinished backfill had every row acked; its redo starts after it). Rows with another
// source, and `last_id`, are left by earlier versions (per-table ids) and are not read.
// Created only when missing; ProgressTableUpgradeSql adds the newer columns to a table of
// an earlier version.
inline std::string ProgressTableDdl(std::string_view quoted_table) {
  return "CREATE TABLE IF NOT EXISTS " + std::string(quoted_table) +
         " (\n"
         "  slot           text NOT NULL,\n"
         "  source         text NOT NULL,\n"
         "  recovering     boolean NOT NULL DEFAULT false,\n"
         "  bound_snapshot pg_snapshot,\n"
         "  bound_lsn      pg_lsn,\n"
         "  delivered_lsn  pg_lsn,\n"
         "  slot_origin    text,\n"
         "  backfill_after_id text,\n"
         "  updated_at     timestamptz NOT NULL DEFAULT now(),\n"
         "  PRIMARY KEY (slot, source)\n"
         ")";
}

// Adds the newer columns to a progress table of an earlier version; nothing (and no
// ownership needed) when they exist. One statement; REQUIRES: no "$walrelay$" in the name.
inline std::string ProgressTableUpgradeSql(std::string_view quoted_table) {
  const std::string t(quoted_table);
  auto missing = [&](std::string_view column) {
    return "NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = " + QuoteLiteral(t) +
           "::regclass AND attname = '" + std::string(column) + "' AND NOT attisdropped)";
  };
  return "DO $walrelay$ BEGIN\n"
         "IF " + missing("bound_snapshot") + " THEN\n"
         "  ALTER TABLE " + t +
         " ADD COLUMN IF NOT EXISTS bound_snapshot pg_snapshot,"
         " ADD COLUMN IF NOT EXISTS bound_lsn pg_lsn;\n"
         "END IF;\n"
         "IF " + missing("backfill_after_id") + " THEN\n"
         "  ALTER TABLE " + t +
         " ADD COLUMN IF NOT EXISTS delivered_lsn pg_lsn,"
         " ADD COLUMN IF NOT EXISTS slot_origin text,"
         " ADD COLUMN IF NOT EXISTS backfill_after_id text;\n"
         "END IF;\n"
         "END $walrelay$";
}

}  // namespace walrelay::relay
