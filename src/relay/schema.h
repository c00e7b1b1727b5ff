// SQL of the objects walrelay works with, in one place: `walrelay setup`, the tests and the
// docs use these, so the documented schema and the code cannot drift apart.
#pragma once

#include <string>
#include <string_view>

namespace walrelay::relay {

// Quotes one identifier ("we""ird"), or a schema-qualified one ("a.b" -> "a"."b").
inline std::string QuoteIdentifier(std::string_view part) {
  std::string q = "\"";
  for (char ch : part) {
    if (ch == '"') q += '"';
    q += ch;
  }
  return q + "\"";
}
// Quotes a string literal ('it''s'); standard_conforming_strings (on since 9.1).
inline std::string QuoteLiteral(std::string_view s) {
  std::string q = "'";
  for (char ch : s) {
    if (ch == '\'') q += '\'';
    q += ch;
  }
  return q + "'";
}
inline std::string QuoteQualifiedIdentifier(std::string_view name) {
  auto dot = name.find('.');
  if (dot == std::string_view::npos) return QuoteIdentifier(name);
  return QuoteIdentifier(name.substr(0, dot)) + "." + QuoteIdentifier(name.substr(dot + 1));
}

// The documented outbox table (see OutboxColumns for the column contract). Idempotent.
// REPLICA IDENTITY stays DEFAULT: only INSERTs publish, so old rows are never needed.
inline std::string OutboxTableDdl(std::string_view qualified_table) {
  std::string t = QuoteQualifiedIdentifier(qualified_table);
  return "CREATE TABLE IF NOT EXISTS " + t +
         " (\n"
         "  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n"
         "  event_id       uuid NOT NULL DEFAULT gen_random_uuid(),\n"
         "  aggregate_type text,\n"
         "  aggregate_id   text NOT NULL,\n"
         "  topic          text,\n"
         "  event_type     text NOT NULL,\n"
         "  payload        jsonb NOT NULL,\n"
         "  headers        jsonb,\n"
         "  created_at     timestamptz NOT NULL DEFAULT now()\n"
         ")";
}

// The dead-letter table (see dead_letter.h). `quoted_table` is already quoted. Idempotent.
inline std::string DeadLetterTableDdl(std::string_view quoted_table) {
  return "CREATE TABLE IF NOT EXISTS " + std::string(quoted_table) +
         " (\n"
         "  id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n"
         "  dead_at      timestamptz NOT NULL DEFAULT now(),\n"
         "  slot         text NOT NULL,\n"
         "  source       text NOT NULL,\n"
         "  commit_lsn   pg_lsn NOT NULL,\n"
         "  ordinal      int NOT NULL,\n"
         "  xid          bigint,\n"
         "  event_id     text,\n"
         "  aggregate_id text,\n"
         "  event_type   text,\n"
         "  topic        text,\n"
         "  reason       text NOT NULL,\n"
         "  payload      bytea,\n"
         "  UNIQUE (slot, commit_lsn, ordinal)\n"
         ")";
}

// Upgrades a dead-letter table created before payload became bytea (any bytes must fit):
// the old text payloads are kept as their UTF-8 bytes. Idempotent; one statement.
inline std::string DeadLetterTableUpgradeSql(std::string_view quoted_table) {
  return "DO $walrelay$ BEGIN IF (SELECT atttypid = 'text'::regtype FROM pg_attribute WHERE "
         "attrelid = " +
         QuoteLiteral(quoted_table) +
         "::regclass AND attname = 'payload' AND NOT attisdropped) THEN ALTER TABLE " +
         std::string(quoted_table) +
         " ALTER COLUMN payload TYPE bytea USING convert_to(payload, 'UTF8'); END IF; END "
         "$walrelay$";
}

// Lost-slot recovery progress: per slot and outbox table, the highest outbox id whose
// transaction PostgreSQL has confirmed; the row with source '*' carries the slot-level
// `recovering` flag (set while a backfill is under way). Idempotent.
inline std::string ProgressTableDdl(std::string_view quoted_table) {
  return "CREATE TABLE IF NOT EXISTS " + std::string(quoted_table) +
         " (\n"
         "  slot       text NOT NULL,\n"
         "  source     text NOT NULL,\n"
         "  last_id    bigint,\n"
         "  recovering boolean NOT NULL DEFAULT false,\n"
         "  updated_at timestamptz NOT NULL DEFAULT now(),\n"
         "  PRIMARY KEY (slot, source)\n"
         ")";
}

}  // namespace walrelay::relay
