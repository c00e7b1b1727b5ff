// `walrelay setup`: creates, idempotently, what `walrelay run` needs in the source
// database — the dead-letter and progress tables, the publication and the logical slot (of
// source.plugin), and the outbox tables (documented schema) only when asked — and checks the
// server settings, explaining what to change. `--dry-run` prints the SQL instead of running
// it.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "src/relay/core/config.h"

namespace walrelay::cli {

// The SQL statements of setup, in order (each idempotent). `partitioned_tables`: configured
// outbox tables that exist and are partitioned (RunSetup asks the server; --dry-run
// assumes none besides those setup makes partitioned). `audit_index_tables`: tables that
// get the created_at index `walrelay audit` reads through (relay::AuditIndexSql; none that
// is partitioned). The slot is created only when it is missing and walrelay never streamed
// it (no progress row): never silently anew.
std::vector<std::string> SetupStatements(const relay::RelayConfig& config, bool create_tables,
                                         const std::set<std::string>& partitioned_tables = {},
                                         const std::set<std::string>& audit_index_tables = {});

// Runs the statements and the settings checks; one outcome line per object (existed or
// created) and advice go to stderr. `create_tables` false: a configured outbox table that
// does not exist is kInvalidArgument before anything is created (with the tables that look
// like outbox tables, for a misspelled name).
// `relay_role` non-empty: the role `walrelay run` will log in as (an existing role; the
// connecting one is the tables' owner) is granted exactly relay::RelayPrivileges, printed as
// GRANTs with --dry-run; a relay role without REPLICATION is warned about (WAL mode).
// The created_at index for `walrelay audit` is made on the outbox tables setup creates, and
// on existing ones too with `audit_index`.
Status RunSetup(const relay::RelayConfig& config, bool create_tables, bool dry_run,
                const std::string& relay_role = "", bool audit_index = false);

}  // namespace walrelay::cli
