// SlotAdmin: SQL over a normal (non-replication) connection for what the relay checks and
// manages around its slot: the publication, pg_replication_slots (position, activity,
// WAL retention), the server settings that matter, and the role's privilege.
//
// Errors follow pg_error.h: kUnavailable (connection lost: retry), kNotFound,
// kFailedPrecondition (operator must act), kPermissionDenied.
// Thread safety: none; one thread per SlotAdmin. The object owns its PGconn.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/lsn.h"
#include "base/status.h"
#include "slot/pg_error.h"

namespace walrelay::slot {

// One row of pg_replication_slots plus the server's current WAL position, read in the
// same statement.
struct SlotInfo {
  std::string slot_name;
  std::string plugin;     // empty for physical slots
  std::string slot_type;  // "logical" or "physical"
  std::string database;   // empty for physical slots
  bool temporary = false;
  bool active = false;
  std::optional<int> active_pid;
  std::optional<Lsn> restart_lsn;          // oldest WAL the slot holds
  std::optional<Lsn> confirmed_flush_lsn;  // logical slots: what the reader confirmed
  // "reserved", "extended", "unreserved" or "lost"; empty when NULL.
  std::string wal_status;
  // Bytes that can still be written before the slot is in danger of losing WAL; nullopt
  // when max_slot_wal_keep_size = -1 (unlimited) or the slot has no restart_lsn.
  std::optional<int64_t> safe_wal_size;
  Lsn current_wal_lsn;  // pg_current_wal_lsn(); on a standby pg_last_wal_replay_lsn()
  // Why the server invalidated the slot (SlotInvalidation); empty while it is valid. An
  // invalidated slot can no longer stream: it must be dropped and made anew.
  std::string invalidation_reason;
  // When the slot was last released by its reader (pg_replication_slots.inactive_since,
  // PostgreSQL 17+, as the server's timestamptz text in UTC); empty while active, or on
  // servers before 17, which do not record it.
  std::string inactive_since;
  // Seconds since inactive_since, by the server's clock; nullopt while active or before 17.
  std::optional<int64_t> inactive_seconds;
  // pg_replication_slots.failover (PostgreSQL 17+): synchronized to standbys with
  // sync_replication_slots on; false before 17.
  bool failover = false;
  // pg_replication_slots.synced (PostgreSQL 17+): this is a standby's copy of a primary's
  // failover slot, kept by slot synchronization (it survives a promotion only once it is
  // not `temporary`); false on a primary and before 17.
  bool synced = false;

  bool invalidated() const { return !invalidation_reason.empty(); }

  // current_wal_lsn - confirmed_flush_lsn (0 if ahead); nullopt without a confirmed LSN.
  std::optional<uint64_t> confirmed_lag_bytes() const;
  // current_wal_lsn - restart_lsn: WAL the slot keeps on the server's disk.
  std::optional<uint64_t> retained_wal_bytes() const;
};

// A configured outbox table as the server resolved it.
struct ResolvedTable {
  std::string configured;    // the name as configured
  uint32_t oid = 0;          // pg_class.oid: what pgoutput's Relation messages carry
  std::string schema, name;  // catalog names (nspname, relname), exact case
  bool partitioned = false;  // relkind 'p': its partitions publish through it
  // schema.name for messages (quoted where needed).
  std::string Display() const;
};

// What a publication publishes of a set of tables.
struct PublicationCheck {
  bool exists = false;
  bool all_tables = false;               // FOR ALL TABLES
  bool via_root = false;                 // publish_via_partition_root
  std::vector<std::string> missing;      // Display() of tables it does not publish
  std::vector<std::string> partitioned;  // Display() of partitioned tables among them
  // What it publishes (pg_publication's pubinsert, pubupdate, pubdelete, pubtruncate).
  bool inserts = true, updates = true, deletes = true, truncates = true;
  // PostgreSQL 15+: Display() of tables published with a row filter (WHERE) or a column
  // list; the row filter as the server prints it.
  std::vector<std::pair<std::string, std::string>> row_filtered;
  std::vector<std::string> column_listed;

  // OK when the publication exists and publishes every table, through the root where
  // one is partitioned; else kFailedPrecondition naming the fix (the ALTER PUBLICATION or
  // CREATE PUBLICATION to run). `may_create`: a missing publication is OK (walrelay
  // creates it). A publication that would skip outbox rows silently, whose events the
  // slot would be confirmed past (it does not publish inserts, or it filters rows or
  // columns of an outbox table), is kInvalidArgument: a configuration no restart cures
  // (exit 2), with the fix and what to republish after it.
  Status Verdict(std::string_view publication, bool may_create) const;
};

// The invalidation reason of a slot from the pg_replication_slots columns its server has,
// in PostgreSQL 17's invalidation_reason words: "wal_removed" (max_slot_wal_keep_size;
// wal_status 'lost', PostgreSQL 14+), "rows_removed" and "wal_level_insufficient"
// (conflicts with recovery on a standby), "idle_timeout" (18: idle_replication_slot_timeout);
// PostgreSQL 16 tells a conflict only by `conflicting` = true, reported as "conflicting".
// `invalidation_reason` (17+) wins over `conflicting` (16+) over `wal_status`. Empty: valid.
// Only wal_status is exercised against a live server in the tests (PostgreSQL 15).
std::string SlotInvalidation(std::string_view wal_status, std::optional<bool> conflicting,
                             std::string_view invalidation_reason);

// One sentence for an operator: what the reason means and what caused it.
std::string ExplainSlotInvalidation(std::string_view reason);

struct ServerSettings {
  std::string wal_level;
  int64_t max_slot_wal_keep_size_bytes = -1;  // -1 = unlimited
  int max_replication_slots = 0;
  int max_wal_senders = 0;
  std::chrono::milliseconds wal_sender_timeout{0};  // 0 = disabled
  int server_version_num = 0;                       // e.g. 150004
  // PostgreSQL 17+: the physical slots whose standbys must have received WAL before a
  // logical walsender sends it (comma-separated; empty: none, or before 17).
  std::string synchronized_standby_slots;
  // synchronized_standby_slots as slot names (spaces and quotes removed).
  std::vector<std::string> StandbySlots() const;
  // PostgreSQL 18+: a slot not read for longer is invalidated at the next checkpoint
  // (invalidation_reason idle_timeout). 0 = disabled, or before 18.
  std::chrono::seconds idle_replication_slot_timeout{0};
};

// OK when the server can decode logically (wal_level = logical); else kFailedPrecondition
// with the fix (ALTER SYSTEM SET wal_level = logical, then a restart).
Status RequireLogicalWalLevel(const ServerSettings& settings);

class SlotAdmin {
 public:
  // `conninfo`: a libpq keyword/value string or URI and a password apart (ConnInfo);
  // replication is forced off. The session runs with kRelaySession (pg_error.h): local
  // commits, 30 s statement timeout.
  static Result<std::unique_ptr<SlotAdmin>> Connect(const ConnInfo& conninfo);

  // Resolves configured table names as the server does (to_regclass: SQL name rules,
  // base/sql.h, and search_path for unqualified names) to their OIDs and catalog names:
  // the relay matches the stream's relations by these, never by the configured text.
  // kInvalidArgument for a name that does not parse; kNotFound for a table that does not
  // exist; kFailedPrecondition for a relation that is not a table, or for a partition
  // (its rows are published under its root: configure the root).
  Result<std::vector<ResolvedTable>> ResolveTables(const std::vector<std::string>& names);

  // What publication `name` publishes of `tables` (read-only).
  Result<PublicationCheck> CheckPublication(std::string_view name,
                                            const std::vector<ResolvedTable>& tables);

  // Makes sure publication `name` publishes every table of `tables` through the partition
  // root. Creates it (FOR TABLE ... WITH (publish_via_partition_root = true)) if missing.
  // An existing publication is never altered: when it misses a table, or lacks
  // publish_via_partition_root while a table is partitioned, kFailedPrecondition names
  // the ALTER PUBLICATION to run. A FOR ALL TABLES publication covers every table.
  // Returns the resolved tables (see ResolveTables for their errors).
  Result<std::vector<ResolvedTable>> EnsurePublication(std::string_view name,
                                                       const std::vector<std::string>& tables);

  // The slot's row; kNotFound if there is no such slot.
  Result<SlotInfo> GetSlot(std::string_view slot_name);
  // Every slot of the cluster (all databases, logical and physical), by name.
  Result<std::vector<SlotInfo>> ListSlots();
  // pg_drop_replication_slot. kNotFound if missing, kFailedPrecondition if active.
  Status DropSlot(std::string_view slot_name);

  // The slot's lock: a session-level advisory lock of this connection, keyed by the slot's
  // name, that every walrelay process holds while it decides what becomes of the slot —
  // from reading its state to streaming it (the relay), or to making it anew (`republish
  // --create-slot`). Without it two relays of one slot (an active one and its standby) act
  // on stale reads of each other's work: one drops the slot the other has just made and is
  // republishing against, and the WAL of that slot, which table-less events exist only in,
  // is gone. True when taken (again, if this connection already held it); false when
  // another session holds it (SlotLockHolder says which). Released by UnlockSlot, or when
  // the connection closes (a process that dies holds nothing).
  Result<bool> TryLockSlot(std::string_view slot_name);
  Status UnlockSlot(std::string_view slot_name);
  // The pid of the backend holding the slot's lock; nullopt when no one holds it.
  Result<std::optional<int>> SlotLockHolder(std::string_view slot_name);
  // Who a backend serves, for messages that name another relay rather than a pid
  // (pg_stat_activity): "pid 1234, application 'walrelay' from 10.0.0.5:51234, connected
  // 2026-12-06 19:40:02 UTC"; the client's address is "a local socket" for a Unix socket and
  // left out where the role may not see it. "pid 1234 (gone)" when it has exited.
  Result<std::string> DescribeBackend(int pid);
  // How many rows `qualified_table` holds, counted up to `limit` (a cheap bounded scan):
  // min(rows, limit).
  Result<int64_t> CountRowsUpTo(std::string_view qualified_table, int64_t limit);

  Result<ServerSettings> GetServerSettings();
  // pg_current_wal_lsn(); on a standby (in recovery) pg_last_wal_replay_lsn().
  Result<Lsn> CurrentWalLsn();

  // pg_logical_emit_message(transactional, prefix, content): a message every logical slot
  // of the database sees (heartbeats). Returns once written.
  Status EmitMessage(bool transactional, std::string_view prefix, std::string_view content);

  std::string user() const;
  // TransportSecurityWarning of this connection ("" when local or verified TLS).
  std::string TransportWarning() const;

 private:
  explicit SlotAdmin(PgConnPtr conn) : conn_(std::move(conn)) {}
  Result<PgResultPtr> Query(std::string_view what, const std::string& sql,
                            const std::vector<std::string>& params = {});
  Result<std::vector<SlotInfo>> SelectSlots(const std::string& where,
                                            const std::vector<std::string>& params);
  Status EnsurePublicationOnce(std::string_view name, const std::vector<ResolvedTable>& tables,
                               bool retry_on_race);

  PgConnPtr conn_;
};

}  // namespace walrelay::slot
