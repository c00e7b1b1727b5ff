// Test-only support for the golden tests of the decoders against a real PostgreSQL 15:
// a workload that exercises what the relay can meet (TOAST, NULLs, unicode, replica
// identity DEFAULT/FULL, TRUNCATE, logical messages, ALTER TABLE mid-stream, rollbacks,
// savepoints, a 100k-row transaction), the capture of a slot's output through SQL, and a
// ReplicaModel that applies decoded pgoutput::Message values (from either decoder) to an
// in-memory copy of the tables so that it can be compared row for row with the server.
//
// Not part of any library. Thread safety: none.
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/lsn.h"
#include "base/status.h"
#include "decoder/pgoutput.h"
#include "decoder/relation_cache.h"
#include "decoder/transaction_assembler.h"

namespace walrelay::golden {

// A libpq connection for the test (PQfinish on destruction).
class PgConn {
 public:
  static Result<std::unique_ptr<PgConn>> Connect(const std::string& conninfo);
  ~PgConn();
  PgConn(const PgConn&) = delete;
  PgConn& operator=(const PgConn&) = delete;

  // Simple-query protocol; several statements allowed.
  Status Exec(std::string_view sql);
  // Rows as text (nullopt for NULL) with the column names.
  struct Rows {
    std::vector<std::string> names;
    std::vector<std::vector<std::optional<std::string>>> rows;
  };
  Result<Rows> Query(std::string_view sql);
  PGconn* get() { return conn_; }

 private:
  explicit PgConn(PGconn* c) : conn_(c) {}
  PGconn* conn_ = nullptr;
};

// One row of pg_logical_slot_peek_(binary_)changes.
struct Captured {
  Lsn lsn;
  uint32_t xid = 0;
  std::string data;
};

// SELECT lsn, xid, data FROM pg_logical_slot_peek_binary_changes(slot, NULL, NULL, options)
// in binary result format (the bytea arrives as raw bytes). `options` are name/value pairs.
Result<std::vector<Captured>> PeekBinary(PgConn* conn, std::string_view slot,
                                         const std::vector<std::string>& options);
// The same with pg_logical_slot_peek_changes (text output plugins such as wal2json).
Result<std::vector<Captured>> PeekText(PgConn* conn, std::string_view slot,
                                       const std::vector<std::string>& options);

// DDL run before the slots are created: the tables and publication `p`.
std::string_view SchemaSql();
// The workload, statement group by statement group (each a separate Exec).
const std::vector<std::string>& WorkloadSql();
// Tables the workload writes, in comparison order.
const std::vector<std::string>& WorkloadTables();
inline constexpr int kBulkRows = 100000;

// A replica of the workload tables built from decoded messages. Rows are keyed by the
// text of their `id` column (every workload table has one). Applying a change checks it
// against the replica: the old tuple of an update/delete must name an existing row, a
// FULL old tuple must equal that row, an unchanged-TOAST column must have an old value.
class ReplicaModel {
 public:
  using Row = std::map<std::string, std::optional<std::string>>;  // column -> text/NULL

  // Feeds one message through the assembler and relation cache and applies it.
  Status Apply(const pgoutput::Message& m);
  // Compares every workload table with SELECT * ... ORDER BY id on `conn`.
  Status CompareWithServer(PgConn* conn) const;

  const std::map<std::string, Row>& table(const std::string& name) const;
  const pgoutput::RelationCache& relations() const { return cache_; }
  bool in_transaction() const { return assembler_.in_transaction(); }

  // Observations for the tests.
  struct Stats {
    int begins = 0, commits = 0, relations = 0, inserts = 0, updates = 0, deletes = 0,
        truncates = 0, messages = 0;
    int unchanged_toast_columns = 0;  // 'u' columns in update new tuples
    int updates_with_key = 0, updates_with_full = 0, updates_without_old = 0;
    int deletes_with_key = 0, deletes_with_full = 0;
    int binary_columns = 0;
    std::map<std::string, int> relations_per_table;
    std::map<std::string, std::set<std::string>> ids_seen;  // every id ever inserted
  };
  const Stats& stats() const { return stats_; }

  struct SeenMessage {
    bool transactional = false;
    bool inside_transaction = false;
    std::string prefix;
    std::string content;
  };
  const std::vector<SeenMessage>& messages() const { return messages_; }

 private:
  Result<Row> ToRow(const pgoutput::CachedRelation& rel, const pgoutput::TupleView& t,
                    const Row* old_row);
  static std::string Name(const pgoutput::CachedRelation& rel);

  pgoutput::TransactionAssembler assembler_;
  pgoutput::RelationCache cache_;
  std::map<std::string, std::map<std::string, Row>> tables_;
  Stats stats_;
  std::vector<SeenMessage> messages_;
};

// "\x00ff" style hex of bytes, for messages.
std::string Hex(std::string_view bytes);

}  // namespace walrelay::golden
