#include "tests/decoder/golden_support.h"

#include <arpa/inet.h>

#include <cstring>
#include <utility>

namespace walrelay::golden {

namespace {

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

uint64_t LoadBe(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::string Quote(std::string_view s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += '\'';
    q += c;
  }
  return q + "'";
}

Result<std::vector<Captured>> Peek(PgConn* conn, std::string_view function, std::string_view slot,
                                   const std::vector<std::string>& options, bool binary_data) {
  std::string sql =
      "SELECT lsn, xid, data FROM " + std::string(function) + "(" + Quote(slot) + ", NULL, NULL";
  for (const std::string& o : options) sql += ", " + Quote(o);
  sql += ")";
  // Binary result format: lsn is pg_lsn (int64), xid is xid (uint32), data raw bytes.
  ResultPtr res(PQexecParams(conn->get(), sql.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 1));
  if (PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
    return InvalidArgumentError("peek failed: " + std::string(PQerrorMessage(conn->get())));
  }
  std::vector<Captured> out;
  const int n = PQntuples(res.get());
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    Captured c;
    if (PQgetlength(res.get(), i, 0) != 8) return InternalError("pg_lsn is not 8 bytes");
    c.lsn = Lsn(LoadBe(PQgetvalue(res.get(), i, 0), 8));
    if (!PQgetisnull(res.get(), i, 1)) {
      if (PQgetlength(res.get(), i, 1) != 4) return InternalError("xid is not 4 bytes");
      c.xid = static_cast<uint32_t>(LoadBe(PQgetvalue(res.get(), i, 1), 4));
    }
    c.data.assign(PQgetvalue(res.get(), i, 2), static_cast<size_t>(PQgetlength(res.get(), i, 2)));
    (void)binary_data;  // text and bytea both arrive as their raw bytes in binary format
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<PgConn>> PgConn::Connect(const std::string& conninfo) {
  PGconn* c = PQconnectdb(conninfo.c_str());
  if (c == nullptr || PQstatus(c) != CONNECTION_OK) {
    std::string err = c ? PQerrorMessage(c) : "out of memory";
    PQfinish(c);
    return UnavailableError("connect: " + err);
  }
  return std::unique_ptr<PgConn>(new PgConn(c));
}

PgConn::~PgConn() { PQfinish(conn_); }

Status PgConn::Exec(std::string_view sql) {
  ResultPtr res(PQexec(conn_, std::string(sql).c_str()));
  const ExecStatusType st = PQresultStatus(res.get());
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    return InvalidArgumentError(std::string(PQerrorMessage(conn_)) +
                                " in: " + std::string(sql.substr(0, 200)));
  }
  return Status::Ok();
}

Result<PgConn::Rows> PgConn::Query(std::string_view sql) {
  ResultPtr res(PQexec(conn_, std::string(sql).c_str()));
  if (PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
    return InvalidArgumentError(std::string(PQerrorMessage(conn_)) + " in: " + std::string(sql));
  }
  Rows rows;
  for (int c = 0; c < PQnfields(res.get()); ++c) rows.names.emplace_back(PQfname(res.get(), c));
  for (int r = 0; r < PQntuples(res.get()); ++r) {
    std::vector<std::optional<std::string>> row;
    for (int c = 0; c < PQnfields(res.get()); ++c) {
      if (PQgetisnull(res.get(), r, c)) {
        row.emplace_back(std::nullopt);
      } else {
        row.emplace_back(std::string(PQgetvalue(res.get(), r, c),
                                     static_cast<size_t>(PQgetlength(res.get(), r, c))));
      }
    }
    rows.rows.push_back(std::move(row));
  }
  return rows;
}

Result<std::vector<Captured>> PeekBinary(PgConn* conn, std::string_view slot,
                                         const std::vector<std::string>& options) {
  return Peek(conn, "pg_logical_slot_peek_binary_changes", slot, options, true);
}

Result<std::vector<Captured>> PeekText(PgConn* conn, std::string_view slot,
                                       const std::vector<std::string>& options) {
  return Peek(conn, "pg_logical_slot_peek_changes", slot, options, false);
}

std::string_view SchemaSql() {
  return R"sql(
CREATE TABLE docs (id int PRIMARY KEY, doc jsonb, note text, big text);
CREATE TABLE full_t (id int PRIMARY KEY, v text, big jsonb);
ALTER TABLE full_t REPLICA IDENTITY FULL;
CREATE TABLE trunc_t (id int PRIMARY KEY, v text);
CREATE TABLE bin_t (id int PRIMARY KEY, b bytea);
CREATE TABLE bulk (id int PRIMARY KEY, v text);
CREATE PUBLICATION p FOR ALL TABLES;
)sql";
}

const std::vector<std::string>& WorkloadSql() {
  // Large values: concatenated md5 hex strings hardly compress, so they are TOASTed
  // out of line (> 8 kB, above TOAST_TUPLE_THRESHOLD even after pglz).
  static const std::vector<std::string> kSql = {
      R"sql(INSERT INTO docs VALUES (1, '{"a": 1, "b": [true, null, "x"]}', 'plain', NULL))sql",
      R"sql(INSERT INTO docs VALUES (2, NULL, NULL, NULL))sql",
      "INSERT INTO docs VALUES (3, '{\"emoji\": \"😀🎉\", \"cjk\": \"漢字かな\", \"comb\": "
      "\"e\u0301\"}', E'emoji 😀 cjk 漢字 combining e\\u0301 tab\\t nl\\n quote'' bs\\\\', NULL)",
      R"sql(INSERT INTO docs SELECT 4,
              (SELECT jsonb_build_object('blob', string_agg(md5(g::text), ''))
                 FROM generate_series(1, 600) g),
              'large',
              (SELECT string_agg(md5((g * 7)::text), '') FROM generate_series(1, 600) g))sql",
      // doc and big are TOASTed and unchanged: pgoutput sends them as 'u'.
      "UPDATE docs SET note = 'touched' WHERE id = 4",
      // Key change under REPLICA IDENTITY DEFAULT: old key 'K'.
      "UPDATE docs SET id = 30 WHERE id = 3",
      "UPDATE docs SET doc = NULL, note = '' WHERE id = 1",
      "DELETE FROM docs WHERE id = 2",
      R"sql(INSERT INTO full_t VALUES (1, 'one', '{"k": 1}'), (2, 'two', NULL),
              (3, 'three', (SELECT jsonb_build_object('blob', string_agg(md5(g::text), ''))
                              FROM generate_series(1, 500) g)))sql",
      "UPDATE full_t SET v = 'uno' WHERE id = 1",
      "UPDATE full_t SET v = 'tres' WHERE id = 3",
      "DELETE FROM full_t WHERE id = 2",
      "INSERT INTO trunc_t VALUES (1, 'a'), (2, 'b')",
      "TRUNCATE trunc_t",
      "INSERT INTO trunc_t VALUES (3, 'after truncate')",
      R"sql(BEGIN;
            INSERT INTO docs VALUES (5, '{}', 'with message', NULL);
            SELECT pg_logical_emit_message(true, 'walrelay', '{"event": "tx"}');
            COMMIT)sql",
      "SELECT pg_logical_emit_message(false, 'walrelay', 'non-transactional ✓')",
      R"sql(SELECT pg_logical_emit_message(false, 'bin', '\x00ff01'::bytea))sql",
      "ALTER TABLE docs ADD COLUMN extra text",
      R"sql(INSERT INTO docs VALUES (6, '{"after": "alter"}', 'after alter', NULL, 'extra!'))sql",
      "UPDATE docs SET extra = 'set' WHERE id = 1",
      R"sql(BEGIN;
            INSERT INTO docs VALUES (7, '{}', 'rolled back', NULL, NULL);
            UPDATE docs SET note = 'rolled back' WHERE id = 1;
            ROLLBACK)sql",
      R"sql(BEGIN;
            INSERT INTO docs VALUES (8, '{}', 'kept before savepoint', NULL, NULL);
            SAVEPOINT s1;
            INSERT INTO docs VALUES (9, '{}', 'rolled back savepoint', NULL, NULL);
            UPDATE docs SET note = 'rolled back savepoint' WHERE id = 8;
            ROLLBACK TO SAVEPOINT s1;
            SAVEPOINT s2;
            INSERT INTO docs VALUES (10, '{"kept": true}', 'kept savepoint 2', NULL, NULL);
            RELEASE SAVEPOINT s2;
            COMMIT)sql",
      R"sql(INSERT INTO bin_t VALUES (1, '\x00010203ff'), (2, NULL), (-5, ''::bytea))sql",
      "INSERT INTO bulk SELECT g, md5(g::text) FROM generate_series(1, 100000) g",
  };
  return kSql;
}

const std::vector<std::string>& WorkloadTables() {
  static const std::vector<std::string> kTables = {"public.docs", "public.full_t", "public.trunc_t",
                                                   "public.bin_t", "public.bulk"};
  return kTables;
}

std::string Hex(std::string_view bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string s = "\\x";
  for (unsigned char c : bytes) {
    s += kDigits[c >> 4];
    s += kDigits[c & 15];
  }
  return s;
}

std::string ReplicaModel::Name(const pgoutput::CachedRelation& rel) {
  return rel.namespace_name + "." + rel.relation_name;
}

const std::map<std::string, ReplicaModel::Row>& ReplicaModel::table(const std::string& name) const {
  static const std::map<std::string, Row> kEmpty;
  auto it = tables_.find(name);
  return it == tables_.end() ? kEmpty : it->second;
}

Result<ReplicaModel::Row> ReplicaModel::ToRow(const pgoutput::CachedRelation& rel,
                                              const pgoutput::TupleView& t, const Row* old_row) {
  Row row;
  size_t i = 0;
  for (const pgoutput::ColumnValue& v : t) {
    const std::string& name = rel.columns[i++].name;
    switch (v.kind) {
      case pgoutput::ColumnKind::kNull:
        row[name] = std::nullopt;
        break;
      case pgoutput::ColumnKind::kText:
        row[name] = std::string(v.data);
        break;
      case pgoutput::ColumnKind::kBinary:
        ++stats_.binary_columns;
        row[name] = std::string(v.data);
        break;
      case pgoutput::ColumnKind::kUnchanged: {
        if (old_row == nullptr) return DataLossError("'u' column " + name + " without old row");
        auto it = old_row->find(name);
        if (it == old_row->end()) return DataLossError("'u' column " + name + " unknown before");
        if (!it->second) return DataLossError("'u' column " + name + " was NULL before");
        ++stats_.unchanged_toast_columns;
        row[name] = it->second;
        break;
      }
    }
  }
  return row;
}

Status ReplicaModel::Apply(const pgoutput::Message& m) {
  WALRELAY_ASSIGN_OR_RETURN(auto event, assembler_.Feed(m));
  using B = pgoutput::TransactionAssembler::Boundary;
  if (event.boundary == B::kBegin) ++stats_.begins;
  if (event.boundary == B::kCommit) ++stats_.commits;

  if (const auto* rel = std::get_if<pgoutput::Relation>(&m)) {
    const pgoutput::CachedRelation* c = cache_.Put(*rel);
    ++stats_.relations;
    ++stats_.relations_per_table[Name(*c)];
  } else if (const auto* ins = std::get_if<pgoutput::Insert>(&m)) {
    WALRELAY_ASSIGN_OR_RETURN(const pgoutput::CachedRelation* rel,
                              cache_.FindForTuple(ins->relation_id, ins->new_tuple));
    WALRELAY_ASSIGN_OR_RETURN(Row row, ToRow(*rel, ins->new_tuple, nullptr));
    if (!row["id"]) return DataLossError("insert without id");
    const std::string id = *row["id"];
    auto& t = tables_[Name(*rel)];
    if (t.count(id)) return DataLossError("insert of existing id " + id + " into " + Name(*rel));
    stats_.ids_seen[Name(*rel)].insert(id);
    t[id] = std::move(row);
    ++stats_.inserts;
  } else if (const auto* upd = std::get_if<pgoutput::Update>(&m)) {
    WALRELAY_ASSIGN_OR_RETURN(const pgoutput::CachedRelation* rel,
                              cache_.FindForTuple(upd->relation_id, upd->new_tuple));
    auto& t = tables_[Name(*rel)];
    std::string old_id;
    if (upd->old_kind == pgoutput::OldTupleKind::kNone) {
      ++stats_.updates_without_old;
    } else {
      WALRELAY_ASSIGN_OR_RETURN(Row old, ToRow(*rel, upd->old_tuple, nullptr));
      if (!old["id"]) return DataLossError("update old tuple without id");
      old_id = *old["id"];
      auto it = t.find(old_id);
      if (it == t.end()) return DataLossError("update of unknown id " + old_id);
      if (upd->old_kind == pgoutput::OldTupleKind::kFull) {
        ++stats_.updates_with_full;
        for (const auto& [name, value] : old) {
          auto cur = it->second.find(name);
          const std::optional<std::string> have =
              cur == it->second.end() ? std::nullopt : cur->second;
          if (have != value) return DataLossError("FULL old tuple differs in column " + name);
        }
      } else {
        ++stats_.updates_with_key;
      }
    }
    // The new tuple's key locates the row when no old tuple was sent.
    std::optional<std::string> new_id;
    {
      size_t i = 0;
      for (const pgoutput::ColumnValue& v : upd->new_tuple) {
        if (rel->columns[i++].name == "id" && v.has_value()) {
          new_id = std::string(v.data);
        }
      }
    }
    if (old_id.empty()) {
      if (!new_id) return DataLossError("update without id");
      old_id = *new_id;
    }
    auto it = t.find(old_id);
    if (it == t.end()) return DataLossError("update of unknown id " + old_id);
    WALRELAY_ASSIGN_OR_RETURN(Row row, ToRow(*rel, upd->new_tuple, &it->second));
    t.erase(it);
    const std::string id = *row["id"];
    t[id] = std::move(row);
    ++stats_.updates;
  } else if (const auto* del = std::get_if<pgoutput::Delete>(&m)) {
    WALRELAY_ASSIGN_OR_RETURN(const pgoutput::CachedRelation* rel,
                              cache_.FindForTuple(del->relation_id, del->old_tuple));
    WALRELAY_ASSIGN_OR_RETURN(Row old, ToRow(*rel, del->old_tuple, nullptr));
    if (!old["id"]) return DataLossError("delete without id");
    auto& t = tables_[Name(*rel)];
    auto it = t.find(*old["id"]);
    if (it == t.end()) return DataLossError("delete of unknown id " + *old["id"]);
    if (del->old_kind == pgoutput::OldTupleKind::kFull) {
      ++stats_.deletes_with_full;
      for (const auto& [name, value] : old) {
        auto cur = it->second.find(name);
        const std::optional<std::string> have =
            cur == it->second.end() ? std::nullopt : cur->second;
        if (have != value) return DataLossError("FULL old tuple (delete) differs in " + name);
      }
    } else {
      ++stats_.deletes_with_key;
    }
    t.erase(it);
    ++stats_.deletes;
  } else if (const auto* tr = std::get_if<pgoutput::Truncate>(&m)) {
    for (pgoutput::Oid oid : tr->relation_ids) {
      const pgoutput::CachedRelation* rel = cache_.Find(oid);
      if (rel == nullptr) return DataLossError("truncate of unknown relation");
      tables_[Name(*rel)].clear();
    }
    ++stats_.truncates;
  } else if (const auto* msg = std::get_if<pgoutput::LogicalMessage>(&m)) {
    messages_.push_back({msg->transactional(), assembler_.in_transaction(),
                         std::string(msg->prefix), std::string(msg->content)});
    ++stats_.messages;
  }
  return Status::Ok();
}

Status ReplicaModel::CompareWithServer(PgConn* conn) const {
  for (const std::string& name : WorkloadTables()) {
    WALRELAY_ASSIGN_OR_RETURN(PgConn::Rows rows,
                              conn->Query("SELECT * FROM " + name + " ORDER BY id"));
    const auto& model = table(name);
    if (model.size() != rows.rows.size()) {
      return DataLossError(name + ": server has " + std::to_string(rows.rows.size()) +
                           " rows, decoded stream " + std::to_string(model.size()));
    }
    for (const auto& r : rows.rows) {
      size_t id_col = 0;
      while (rows.names[id_col] != "id") ++id_col;
      const std::string id = *r[id_col];
      auto it = model.find(id);
      if (it == model.end()) return DataLossError(name + ": row id " + id + " not decoded");
      for (size_t c = 0; c < r.size(); ++c) {
        auto col = it->second.find(rows.names[c]);
        const std::optional<std::string> have =
            col == it->second.end() ? std::nullopt : col->second;
        if (have != r[c]) {
          return DataLossError(name + " id " + id + " column " + rows.names[c] + ": server '" +
                               r[c].value_or("NULL").substr(0, 80) + "' decoded '" +
                               have.value_or("NULL").substr(0, 80) + "'");
        }
      }
      if (it->second.size() > r.size()) return DataLossError(name + ": extra decoded columns");
    }
  }
  return Status::Ok();
}

}  // namespace walrelay::golden
