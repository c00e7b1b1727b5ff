// ProgressStore: what lost-slot recovery needs to know, kept in a small table of the source
// database (schema.h, ProgressTableDdl): per outbox table, the highest outbox id whose
// transaction PostgreSQL confirmed, and whether a recovery backfill is under way.
//
// Written by the relay every few seconds (so it trails the confirmed position a little:
// recovery then republishes a few more rows, never fewer). Thread safety: one owner thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "slot/pg_error.h"

namespace walrelay::relay {

struct Progress {
  bool exists = false;                     // any row for the slot: the slot has streamed before
  bool recovering = false;                 // a backfill started and did not finish
  std::map<std::string, int64_t> last_id;  // outbox table -> highest confirmed id
  int64_t updated_at_unix = 0;             // when last_id was last written
};

class ProgressStore {
 public:
  // Connects (normal connection, slot::kRelaySession) and creates the table only when it
  // is missing: on an existing table the role needs SELECT, INSERT and UPDATE, no CREATE.
  static Result<std::unique_ptr<ProgressStore>> Open(const std::string& conninfo,
                                                     const std::string& table);
  ProgressStore(const ProgressStore&) = delete;
  ProgressStore& operator=(const ProgressStore&) = delete;

  Result<Progress> Load(const std::string& slot);
  // Raises last_id per table (never lowers it) and marks the slot as having streamed.
  Status Save(const std::string& slot, const std::map<std::string, int64_t>& last_id);
  Status SetRecovering(const std::string& slot, bool recovering);

 private:
  ProgressStore(slot::PgConnPtr conn, std::string table)
      : conn_(std::move(conn)), table_(std::move(table)) {}
  Result<slot::PgResultPtr> Exec(const std::string& sql, const std::vector<std::string>& params,
                                 std::string_view what);
  slot::PgConnPtr conn_;
  std::string table_;  // quoted
};

}  // namespace walrelay::relay
