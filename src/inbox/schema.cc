// The inbox's tables: created by EnsureSchema, described in docs/inbox.md ("Schema").
#include <atomic>

#include "src/inbox/impl.h"
#include "src/inbox/pg.h"

namespace walrelay::inbox {

namespace {

constexpr std::string_view kSchema = R"sql(
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('walrelay.inbox.schema'));
CREATE TABLE IF NOT EXISTS inbox (
  consumer    text        NOT NULL,
  message_id  text        NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, message_id)
);
CREATE INDEX IF NOT EXISTS inbox_consumer_received_at ON inbox (consumer, received_at);
CREATE TABLE IF NOT EXISTS inbox_dead_letter (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  dead_at     timestamptz NOT NULL DEFAULT now(),
  consumer    text        NOT NULL,
  message_id  text,
  topic       text        NOT NULL,
  "partition" int         NOT NULL,
  "offset"    bigint      NOT NULL,
  key         bytea,
  value       bytea,
  headers     jsonb       NOT NULL,
  reason      text        NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_dead_letter_source
  ON inbox_dead_letter (consumer, topic, "partition", "offset");
COMMIT;
)sql";

}  // namespace

Status InboxConsumer::Impl::EnsureSchema() {
  std::atomic<bool> no_stop{false};
  WALRELAY_ASSIGN_OR_RETURN(PGconn * c, pool_.Acquire(no_stop));
  Lease lease(pool_, c);
  slot::PgFault fault;
  Status st = pg::Command(c, kSchema, "inbox: create schema", &fault);
  if (!st.ok()) pg::Rollback(c);
  return st;
}

}  // namespace walrelay::inbox
