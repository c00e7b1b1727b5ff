// The table privileges the relay's role needs, derived from the configuration: one list
// that `walrelay setup --relay-role NAME` grants (and --dry-run prints) and that `walrelay
// run`'s start checks compare with what the role has, so that the docs, the grants and the
// check cannot drift apart.
//
// What needs what (verified by tests/cli/least_privilege_test.cc):
//   outbox tables   SELECT (lost-slot recovery, dead-letters retry rebuild from the row);
//                   DELETE with the janitor's retention (outbox.cleanup janitor);
//                   UPDATE in poll mode (published_at, retry_count).
//   dead letters    SELECT, INSERT (ON CONFLICT needs SELECT), UPDATE (dead-letters retry
//                   records each letter's outcome).
//   progress        SELECT, INSERT, UPDATE (upserts).
//   schemas         USAGE on each schema other than public that holds one of them.
// Not a table privilege, so not here: REPLICATION (WAL mode; ALTER ROLE ... REPLICATION or
// the platform's role, docs/operations.md), and ownership, which outbox.cleanup partitions
// needs to create and drop partitions.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "src/relay/core/config.h"

typedef struct pg_conn PGconn;

namespace walrelay::relay {

struct Privilege {
  std::string object;      // a table ("public.outbox") or, for USAGE, a schema
  bool schema = false;     // USAGE ON SCHEMA object
  std::string privileges;  // "SELECT, INSERT, UPDATE"
  std::string why;         // one phrase

  // "GRANT SELECT ON public.outbox TO walrelay" (names quoted as needed).
  std::string GrantTo(const std::string& role) const;
};

// Everything `config`'s relay needs on the source database, schemas first.
std::vector<Privilege> RelayPrivileges(const RelayConfig& config);

// The GRANT statements (one per object, only of what is missing) that would give the
// connection's current user what RelayPrivileges says; objects that do not exist are left
// out (the relay creates its own tables when it may); the tables of a schema the user lacks
// USAGE on cannot be read, so their GRANTs are listed whole. Empty when nothing is missing.
Result<std::vector<std::string>> MissingGrants(PGconn* conn, const RelayConfig& config);

}  // namespace walrelay::relay
