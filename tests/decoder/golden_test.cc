// Golden tests of the pgoutput decoder against a real PostgreSQL 15 (LABEL integration).
//
// One TestCluster per test suite: the schema and publication `p` are created, then the
// pgoutput slot `s`, then the workload of golden_support.cc runs. Each test peeks the slot
// (pg_logical_slot_peek_binary_changes, which does not consume) with its own options,
// decodes every message with pgoutput::Decode, feeds RelationCache + TransactionAssembler
// through ReplicaModel, and compares the replica row for row with SELECT * on the server.
//
// With WALRELAY_WRITE_GOLDEN=<dir> set, WriteGoldenFiles also writes
//   <dir>/golden/pgoutput_v1.bin  the stream up to (not including) the 100k-row
//                                 transaction: [Int32 big-endian length][message] records
//   <dir>/corpus/real_*.bin       a few small real messages as fuzz seeds
// e.g. WALRELAY_WRITE_GOLDEN=tests/decoder build-golden/tests/decoder/decoder_golden_test
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "decoder/pgoutput.h"
#include "decoder/transaction_assembler.h"
#include "decoder/wal2json.h"
#include "tests/decoder/golden_support.h"
#include "tests/support/pg_cluster.h"

namespace walrelay::golden {
namespace {

using walrelay::testing::TestCluster;

class PgoutputGolden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto cluster = TestCluster::Start();
    ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
    cluster_ = std::move(*cluster).release();
    auto conn = PgConn::Connect(cluster_->conninfo());
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    conn_ = std::move(*conn).release();
    // The cluster runs with synchronous_commit=off; logical decoding only reads flushed WAL.
    ASSERT_TRUE(conn_->Exec("SET synchronous_commit = on").ok());
    ASSERT_TRUE(conn_->Exec(SchemaSql()).ok());
    ASSERT_TRUE(conn_->Exec("SELECT pg_create_logical_replication_slot('s', 'pgoutput')").ok());
    ASSERT_TRUE(conn_->Exec("SELECT pg_create_logical_replication_slot('w', 'wal2json')").ok());
    for (const std::string& sql : WorkloadSql()) {
      Status st = conn_->Exec(sql);
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
  }
  static void TearDownTestSuite() {
    delete conn_;
    conn_ = nullptr;
    delete cluster_;
    cluster_ = nullptr;
  }

  static std::vector<Captured> Capture(const std::vector<std::string>& options) {
    auto rows = PeekBinary(conn_, "s", options);
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    return rows.ok() ? std::move(*rows) : std::vector<Captured>{};
  }

  static const std::vector<std::string>& V1Options() {
    static const std::vector<std::string> kOptions = {
        "proto_version", "1", "publication_names", "p", "messages", "true"};
    return kOptions;
  }

  static std::vector<Captured> CaptureWal2Json() {
    std::vector<std::string> options;
    for (const auto& [name, value] : wal2json::kRequiredOptions) {
      options.emplace_back(name);
      options.emplace_back(value);
    }
    auto rows = PeekText(conn_, "w", options);
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    return rows.ok() ? std::move(*rows) : std::vector<Captured>{};
  }

  static TestCluster* cluster_;
  static PgConn* conn_;
};

TestCluster* PgoutputGolden::cluster_ = nullptr;
PgConn* PgoutputGolden::conn_ = nullptr;

// Decodes and applies every captured message; fails the test on the first error.
void DecodeAll(const std::vector<Captured>& rows, const pgoutput::DecodeOptions& options,
               ReplicaModel* model, std::vector<pgoutput::MessageType>* types = nullptr) {
  pgoutput::Message m;
  for (size_t i = 0; i < rows.size(); ++i) {
    Status st = pgoutput::Decode(rows[i].data, options, &m);
    ASSERT_TRUE(st.ok()) << "message " << i << " at " << rows[i].lsn.ToString() << ": "
                         << st.ToString();
    if (types) types->push_back(pgoutput::TypeOf(m));
    st = model->Apply(m);
    ASSERT_TRUE(st.ok()) << "message " << i << " ("
                         << pgoutput::MessageTypeName(pgoutput::TypeOf(m)) << ") at "
                         << rows[i].lsn.ToString() << ": " << st.ToString();
  }
  EXPECT_FALSE(model->in_transaction());
}

TEST_F(PgoutputGolden, ProtoV1MatchesServerRowForRow) {
  const std::vector<Captured> rows = Capture(V1Options());
  ASSERT_FALSE(rows.empty());
  ReplicaModel model;
  DecodeAll(rows, {1, false, false}, &model);
  if (HasFatalFailure()) return;

  Status st = model.CompareWithServer(conn_);
  EXPECT_TRUE(st.ok()) << st.ToString();

  const ReplicaModel::Stats& s = model.stats();
  EXPECT_EQ(s.begins, s.commits);
  // The 100k-row transaction arrives whole, in one transaction.
  EXPECT_EQ(model.table("public.bulk").size(), static_cast<size_t>(kBulkRows));
  // UPDATE docs SET note WHERE id = 4 leaves doc and big TOASTed and unchanged: 'u', and
  // the model kept their old values (CompareWithServer proves them equal to the server's).
  EXPECT_GE(s.unchanged_toast_columns, 2);
  // REPLICA IDENTITY DEFAULT: only the key-changing update carries 'K'; FULL: 'O'.
  EXPECT_EQ(s.updates_with_key, 1);
  EXPECT_EQ(s.updates_with_full, 2);
  EXPECT_EQ(s.deletes_with_key, 1);
  EXPECT_EQ(s.deletes_with_full, 1);
  EXPECT_EQ(s.truncates, 1);
  EXPECT_EQ(s.binary_columns, 0);
  // ALTER TABLE ADD COLUMN: a second Relation for docs with 5 columns replaced the first.
  EXPECT_EQ(s.relations_per_table.at("public.docs"), 2);
  // Rolled back transaction and rolled back savepoint: never in the stream.
  const auto& ids = s.ids_seen.at("public.docs");
  EXPECT_EQ(ids.count("7"), 0u);
  EXPECT_EQ(ids.count("9"), 0u);
  EXPECT_EQ(ids.count("8"), 1u);
  EXPECT_EQ(ids.count("10"), 1u);
  EXPECT_EQ(model.table("public.docs").at("8").at("note"), "kept before savepoint");

  // Logical messages: one transactional inside its transaction, two outside any.
  ASSERT_EQ(model.messages().size(), 3u);
  EXPECT_TRUE(model.messages()[0].transactional);
  EXPECT_TRUE(model.messages()[0].inside_transaction);
  EXPECT_EQ(model.messages()[0].prefix, "walrelay");
  EXPECT_EQ(model.messages()[0].content, R"({"event": "tx"})");
  EXPECT_FALSE(model.messages()[1].transactional);
  EXPECT_FALSE(model.messages()[1].inside_transaction);
  EXPECT_EQ(model.messages()[1].content, "non-transactional ✓");
  EXPECT_EQ(model.messages()[2].prefix, "bin");
  EXPECT_EQ(model.messages()[2].content, std::string("\x00\xff\x01", 3));
}

TEST_F(PgoutputGolden, UnchangedToastIsReportedAsUnchangedNotNull) {
  const std::vector<Captured> rows = Capture(V1Options());
  pgoutput::RelationCache cache;
  pgoutput::Message m;
  int found = 0;
  for (const Captured& c : rows) {
    ASSERT_TRUE(pgoutput::Decode(c.data, {1, false, false}, &m).ok());
    if (const auto* rel = std::get_if<pgoutput::Relation>(&m)) (void)cache.Put(*rel);
    const auto* upd = std::get_if<pgoutput::Update>(&m);
    if (upd == nullptr) continue;
    const pgoutput::CachedRelation* rel = cache.Find(upd->relation_id);
    ASSERT_NE(rel, nullptr);
    if (rel->relation_name != "docs") continue;
    std::vector<pgoutput::ColumnValue> cols;
    upd->new_tuple.FillColumns(&cols);
    if (cols[2].data != "touched") continue;
    ++found;
    EXPECT_EQ(upd->old_kind, pgoutput::OldTupleKind::kNone);
    EXPECT_EQ(cols[0], (pgoutput::ColumnValue{pgoutput::ColumnKind::kText, "4"}));
    EXPECT_TRUE(cols[1].is_unchanged_toast());  // doc jsonb
    EXPECT_TRUE(cols[3].is_unchanged_toast());  // big text
    EXPECT_FALSE(cols[1].is_null());
  }
  EXPECT_EQ(found, 1);
}

TEST_F(PgoutputGolden, ProtoV2BinaryColumns) {
  const std::vector<Captured> rows =
      Capture({"proto_version", "2", "publication_names", "p", "messages", "true", "binary", "true",
               "streaming", "off"});
  ASSERT_FALSE(rows.empty());
  ReplicaModel model;
  DecodeAll(rows, {2, false, false}, &model);
  if (HasFatalFailure()) return;
  EXPECT_GT(model.stats().binary_columns, 0);
  // bin_t (id int, b bytea) in binary: int4send (4 bytes big-endian) and byteasend (raw).
  auto server = conn_->Query("SELECT id, encode(b, 'hex') FROM bin_t ORDER BY id");
  ASSERT_TRUE(server.ok());
  const auto& t = model.table("public.bin_t");
  ASSERT_EQ(t.size(), server->rows.size());
  for (const auto& r : server->rows) {
    const int32_t id = std::stoi(*r[0]);
    const uint32_t u = static_cast<uint32_t>(id);
    const std::string key = {static_cast<char>(u >> 24), static_cast<char>(u >> 16),
                             static_cast<char>(u >> 8), static_cast<char>(u)};
    auto it = t.find(key);
    ASSERT_NE(it, t.end()) << "id " << id;
    const auto& b = it->second.at("b");
    if (!r[1]) {
      EXPECT_FALSE(b.has_value());
    } else {
      ASSERT_TRUE(b.has_value());
      EXPECT_EQ(Hex(*b), "\\x" + *r[1]) << "id " << id;
    }
  }
  EXPECT_EQ(model.table("public.bulk").size(), static_cast<size_t>(kBulkRows));
}

// The same workload through the wal2json plugin (format-version 2) and Wal2JsonDecoder:
// the same ReplicaModel must end equal to the server, row for row.
TEST_F(PgoutputGolden, Wal2JsonMatchesServerRowForRow) {
  const std::vector<Captured> rows = CaptureWal2Json();
  ASSERT_FALSE(rows.empty());
  wal2json::Wal2JsonDecoder decoder;
  ReplicaModel model;
  std::vector<pgoutput::Message> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    Status st = decoder.Decode(rows[i].data, &out);
    ASSERT_TRUE(st.ok()) << "row " << i << " at " << rows[i].lsn.ToString() << ": " << st.ToString()
                         << "\n"
                         << rows[i].data.substr(0, 300);
    for (const pgoutput::Message& m : out) {
      st = model.Apply(m);
      ASSERT_TRUE(st.ok()) << "row " << i << " at " << rows[i].lsn.ToString() << ": "
                           << st.ToString() << "\n"
                           << rows[i].data.substr(0, 300);
    }
  }
  EXPECT_FALSE(model.in_transaction());
  Status st = model.CompareWithServer(conn_);
  EXPECT_TRUE(st.ok()) << st.ToString();

  const ReplicaModel::Stats& s = model.stats();
  EXPECT_EQ(s.begins, s.commits);
  EXPECT_EQ(model.table("public.bulk").size(), static_cast<size_t>(kBulkRows));
  // Omitted (unchanged TOAST) columns come out as 'u', as from pgoutput.
  EXPECT_GE(s.unchanged_toast_columns, 2);
  // wal2json sends "identity" on every update (pgoutput only on key change): all 'K'
  // under DEFAULT, 'O' under FULL.
  EXPECT_EQ(s.updates_with_full, 2);
  EXPECT_EQ(s.updates_without_old, 0);
  EXPECT_EQ(s.deletes_with_key, 1);
  EXPECT_EQ(s.deletes_with_full, 1);
  EXPECT_EQ(s.truncates, 1);
  EXPECT_EQ(s.relations_per_table.at("public.docs"), 2);  // the ALTER TABLE re-describes
  const auto& ids = s.ids_seen.at("public.docs");
  EXPECT_EQ(ids.count("7"), 0u);
  EXPECT_EQ(ids.count("9"), 0u);
  EXPECT_EQ(ids.count("10"), 1u);
  ASSERT_EQ(model.messages().size(), 3u);
  EXPECT_TRUE(model.messages()[0].transactional);
  EXPECT_TRUE(model.messages()[0].inside_transaction);
  EXPECT_EQ(model.messages()[0].content, R"({"event": "tx"})");
  EXPECT_FALSE(model.messages()[1].inside_transaction);
  EXPECT_EQ(model.messages()[1].content, "non-transactional ✓");
  // wal2json prints message content as text: binary content is cut at its first NUL.
  EXPECT_EQ(model.messages()[2].content, "");
}

TEST_F(PgoutputGolden, WriteGoldenFiles) {
  const char* dir = std::getenv("WALRELAY_WRITE_GOLDEN");
  if (dir == nullptr) GTEST_SKIP() << "set WALRELAY_WRITE_GOLDEN=<tests/decoder> to write";
  const std::vector<Captured> rows = Capture(V1Options());
  std::ofstream golden(std::string(dir) + "/golden/pgoutput_v1.bin", std::ios::binary);
  ASSERT_TRUE(golden) << dir << "/golden";
  pgoutput::RelationCache cache;
  pgoutput::Message m;
  std::map<std::string, std::string> seeds;  // name -> smallest real message of that kind
  pgoutput::TransactionAssembler assembler;
  std::string pending;
  for (const Captured& c : rows) {
    ASSERT_TRUE(pgoutput::Decode(c.data, {1, false, false}, &m).ok());
    if (const auto* rel = std::get_if<pgoutput::Relation>(&m)) {
      (void)cache.Put(*rel);
      if (rel->relation_name == "bulk") break;  // the 100k-row transaction: not written
    }
    // Whole transactions only: records are written when the transaction commits.
    const uint32_t n = static_cast<uint32_t>(c.data.size());
    pending += {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                static_cast<char>(n)};
    pending += c.data;
    auto event = assembler.Feed(m);
    ASSERT_TRUE(event.ok());
    if (!assembler.in_transaction()) {
      golden.write(pending.data(), static_cast<std::streamsize>(pending.size()));
      pending.clear();
    }
    if (c.data.size() > 512) continue;
    std::string name = "real_" + std::string(pgoutput::MessageTypeName(pgoutput::TypeOf(m)));
    if (const auto* u = std::get_if<pgoutput::Update>(&m)) {
      name += u->old_kind == pgoutput::OldTupleKind::kNone  ? "_new"
              : u->old_kind == pgoutput::OldTupleKind::kKey ? "_key"
                                                            : "_full";
      for (const auto& v : u->new_tuple) {
        if (v.is_unchanged_toast()) {
          name += "_toast";
          break;
        }
      }
    }
    if (const auto* d = std::get_if<pgoutput::Delete>(&m)) {
      name += d->old_kind == pgoutput::OldTupleKind::kKey ? "_key" : "_full";
    }
    if (const auto* lm = std::get_if<pgoutput::LogicalMessage>(&m)) {
      name += lm->transactional() ? "_tx" : "_nontx";
    }
    for (char& ch : name) {
      if (ch == ' ') ch = '_';
    }
    auto it = seeds.find(name);
    if (it == seeds.end() || it->second.size() > c.data.size()) seeds[name] = c.data;
  }
  // wal2json: one JSON document per line, up to the 100k-row transaction.
  std::ofstream jsonl(std::string(dir) + "/golden/wal2json_v2.jsonl", std::ios::binary);
  std::string pending_json;
  for (const Captured& c : CaptureWal2Json()) {
    if (c.data.find(R"("table":"bulk")") != std::string::npos) break;
    ASSERT_EQ(c.data.find('\n'), std::string::npos);
    pending_json += c.data + '\n';
    // Whole transactions only (and non-transactional messages, which stand alone).
    if (c.data.starts_with(R"({"action":"C")") ||
        c.data.find(R"("transactional":false)") != std::string::npos) {
      jsonl << pending_json;
      pending_json.clear();
    }
  }
  for (const auto& [name, bytes] : seeds) {
    std::ofstream seed(std::string(dir) + "/corpus/" + name + "_v1.bin", std::ios::binary);
    ASSERT_TRUE(seed);
    seed.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
}

}  // namespace
}  // namespace walrelay::golden
