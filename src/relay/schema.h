// SQL of the objects walrelay works with, in one place: `walrelay setup`, the tests and the
// docs use these, so the documented schema and the code cannot drift apart.
#pragma once

#include <string>
#include <string_view>

namespace walrelay::relay {

// The documented outbox table (see OutboxColumns for the column contract). Idempotent.
// REPLICA IDENTITY stays DEFAULT: only INSERTs publish, so old rows are never needed.
inline std::string OutboxTableDdl(std::string_view qualified_table) {
  std::string t(qualified_table);
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

}  // namespace walrelay::relay
