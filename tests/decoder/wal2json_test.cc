// Unit tests of the wal2json (format-version 2) decoder with hand-written JSON lines in
// the shape the plugin emits (checked against postgresql-15-wal2json's real output).
#include "decoder/wal2json.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "decoder/relation_cache.h"
#include "decoder/transaction_assembler.h"

namespace walrelay::wal2json {
namespace {

using pgoutput::ColumnKind;
using pgoutput::ColumnValue;
using pgoutput::Message;

std::vector<ColumnValue> Cols(const pgoutput::TupleView& t) {
  std::vector<ColumnValue> v;
  t.FillColumns(&v);
  return v;
}

constexpr const char* kInsert =
    R"({"action":"I","xid":727,"timestamp":"2026-12-02 13:36:11.471854+00","lsn":"0/1505A30",)"
    R"("schema":"public","table":"t","columns":[{"name":"id","type":"integer","typeoid":23,"value":1},)"
    R"({"name":"j","type":"jsonb","typeoid":3802,"value":"{\"a\": [1, 2]}"},)"
    R"({"name":"s","type":"text","typeoid":25,"value":"h\u00e9llo \"q\" 😀"},)"
    R"({"name":"n","type":"numeric","typeoid":1700,"value":1.50},)"
    R"({"name":"b","type":"boolean","typeoid":16,"value":true},)"
    R"({"name":"f","type":"double precision","typeoid":701,"value":1e+300 },)"
    R"({"name":"by","type":"bytea","typeoid":17,"value":"00ff"},)"
    R"({"name":"z","type":"text","typeoid":25,"value":null}],)"
    R"("pk":[{"name":"id","type":"integer","typeoid":23}]})";

TEST(Wal2Json, BeginAndCommit) {
  Wal2JsonDecoder d;
  std::vector<Message> out;
  ASSERT_TRUE(d.Decode(R"({"action":"B","xid":727,"timestamp":"2000-01-01 00:00:01.5+00",)"
                       R"("lsn":"0/150C5D8","nextlsn":"0/150C608"})",
                       &out)
                  .ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(std::get<pgoutput::Begin>(out[0]), (pgoutput::Begin{Lsn(0x150C5D8), 1500000, 727}));
  ASSERT_TRUE(d.Decode(R"({"action":"C","xid":727,"timestamp":"2000-01-01 02:00:00+02",)"
                       R"("lsn":"0/150C5D8","nextlsn":"0/150C608"})",
                       &out)
                  .ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(std::get<pgoutput::Commit>(out[0]),
            (pgoutput::Commit{0, Lsn(0x150C5D8), Lsn(0x150C608), 0}));
}

TEST(Wal2Json, ParseTimestamp) {
  EXPECT_EQ(*ParseTimestamp("2000-01-01 00:00:00+00"), 0);
  EXPECT_EQ(*ParseTimestamp("1999-12-31 23:59:59.999999+00"), -1);
  EXPECT_EQ(*ParseTimestamp("2000-01-02 05:30:00.000001+05:30"), 86400000001LL);
  EXPECT_EQ(*ParseTimestamp("2024-02-29 12:00:00-01"),
            762526800000000LL);  // checked with the server
  EXPECT_FALSE(ParseTimestamp("2024-02-29T12:00:00Z").ok());
  EXPECT_FALSE(ParseTimestamp("2024-02-29 12:00:00").ok());
}

TEST(Wal2Json, InsertSynthesizesRelationOnceAndMapsValues) {
  Wal2JsonDecoder d;
  std::vector<Message> out;
  ASSERT_TRUE(d.Decode(kInsert, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  const auto& rel = std::get<pgoutput::Relation>(out[0]);
  EXPECT_EQ(rel.namespace_name, "public");
  EXPECT_EQ(rel.relation_name, "t");
  EXPECT_EQ(rel.relation_id, d.OidFor("public", "t"));
  ASSERT_EQ(rel.columns.size(), 8u);
  EXPECT_TRUE(rel.columns[0].is_key());
  EXPECT_FALSE(rel.columns[1].is_key());
  EXPECT_EQ(rel.columns[1].name, "j");
  EXPECT_EQ(rel.columns[1].type_oid, 3802u);
  const auto& ins = std::get<pgoutput::Insert>(out[1]);
  EXPECT_EQ(ins.relation_id, rel.relation_id);
  const auto c = Cols(ins.new_tuple);
  ASSERT_EQ(c.size(), 8u);
  EXPECT_EQ(c[0], (ColumnValue{ColumnKind::kText, "1"}));
  EXPECT_EQ(c[1], (ColumnValue{ColumnKind::kText, R"({"a": [1, 2]})"}));
  EXPECT_EQ(c[2], (ColumnValue{ColumnKind::kText, "héllo \"q\" 😀"}));
  EXPECT_EQ(c[3], (ColumnValue{ColumnKind::kText, "1.50"}));  // the exact token
  EXPECT_EQ(c[4], (ColumnValue{ColumnKind::kText, "t"}));     // boolout, as pgoutput
  EXPECT_EQ(c[5], (ColumnValue{ColumnKind::kText, "1e+300"}));
  EXPECT_EQ(c[6], (ColumnValue{ColumnKind::kText, "\\x00ff"}));  // bytea regains its \x
  EXPECT_TRUE(c[7].is_null());

  // Same table, same columns: no second Relation.
  ASSERT_TRUE(d.Decode(kInsert, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<pgoutput::Insert>(out[0]));
}

TEST(Wal2Json, ColumnListChangeResendsRelationWithSameOid) {
  Wal2JsonDecoder d;
  std::vector<Message> out;
  const std::string a =
      R"({"action":"I","schema":"s","table":"t","columns":[{"name":"id","type":"integer","typeoid":23,"value":1}]})";
  const std::string b =
      R"({"action":"I","schema":"s","table":"t","columns":[{"name":"id","type":"integer","typeoid":23,"value":2},)"
      R"({"name":"extra","type":"text","typeoid":25,"value":"x"}]})";
  ASSERT_TRUE(d.Decode(a, &out).ok());
  const pgoutput::Oid oid = std::get<pgoutput::Relation>(out[0]).relation_id;
  ASSERT_TRUE(d.Decode(b, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(std::get<pgoutput::Relation>(out[0]).relation_id, oid);
  EXPECT_EQ(std::get<pgoutput::Relation>(out[0]).columns.size(), 2u);
  // Reset forgets descriptions but keeps OIDs.
  d.Reset();
  ASSERT_TRUE(d.Decode(b, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(std::get<pgoutput::Relation>(out[0]).relation_id, oid);
  EXPECT_NE(d.OidFor("s", "other"), oid);
}

TEST(Wal2Json, UpdateOmittedToastColumnIsUnchangedAndIdentityIsKey) {
  Wal2JsonDecoder d;
  std::vector<Message> out;
  ASSERT_TRUE(d.Decode(R"({"action":"I","schema":"p","table":"d","columns":[)"
                       R"({"name":"id","type":"integer","typeoid":23,"value":1},)"
                       R"({"name":"big","type":"text","typeoid":25,"value":"long"},)"
                       R"({"name":"x","type":"integer","typeoid":23,"value":1}],)"
                       R"("pk":[{"name":"id","type":"integer","typeoid":23}]})",
                       &out)
                  .ok());
  ASSERT_TRUE(d.Decode(R"({"action":"U","schema":"p","table":"d","columns":[)"
                       R"({"name":"id","type":"integer","typeoid":23,"value":1},)"
                       R"({"name":"x","type":"integer","typeoid":23,"value":2}],)"
                       R"("identity":[{"name":"id","type":"integer","typeoid":23,"value":1}],)"
                       R"("pk":[{"name":"id","type":"integer","typeoid":23}]})",
                       &out)
                  .ok());
  ASSERT_EQ(out.size(), 1u);
  const auto& u = std::get<pgoutput::Update>(out[0]);
  EXPECT_EQ(u.old_kind, pgoutput::OldTupleKind::kKey);
  auto old = Cols(u.old_tuple);
  ASSERT_EQ(old.size(), 3u);
  EXPECT_EQ(old[0].data, "1");
  EXPECT_TRUE(old[1].is_null());
  auto n = Cols(u.new_tuple);
  ASSERT_EQ(n.size(), 3u);
  EXPECT_TRUE(n[1].is_unchanged_toast());
  EXPECT_FALSE(n[1].is_null());
  EXPECT_EQ(n[2].data, "2");
}

TEST(Wal2Json, DeleteFullIdentityIsOldTuple) {
  Wal2JsonDecoder d;
  std::vector<Message> out;
  ASSERT_TRUE(d.Decode(R"({"action":"D","schema":"p","table":"f","identity":[)"
                       R"({"name":"id","type":"integer","typeoid":23,"value":2},)"
                       R"({"name":"v","type":"text","typeoid":25,"value":null}],)"
                       R"("pk":[{"name":"id","type":"integer","typeoid":23}]})",
                       &out)
                  .ok());
  ASSERT_EQ(out.size(), 2u);  // unknown table: described from the identity
  const auto& del = std::get<pgoutput::Delete>(out[1]);
  EXPECT_EQ(del.old_kind, pgoutput::OldTupleKind::kFull);
  EXPECT_EQ(Cols(del.old_tuple).size(), 2u);
}

TEST(Wal2Json, MessagesAndTruncate) {
  Wal2JsonDecoder d;
  std::vector<Message> out;
  ASSERT_TRUE(d.Decode(R"({"action":"M","xid":null,"timestamp":null,"lsn":"0/150C6B0",)"
                       R"("transactional":false,"prefix":"pfx","content":"a\u0000b"})",
                       &out)
                  .ok());
  ASSERT_EQ(out.size(), 1u);
  const auto& m = std::get<pgoutput::LogicalMessage>(out[0]);
  EXPECT_FALSE(m.transactional());
  EXPECT_EQ(m.lsn, Lsn(0x150C6B0));
  EXPECT_EQ(m.prefix, "pfx");
  EXPECT_EQ(m.content, std::string_view("a\0b", 3));
  ASSERT_TRUE(
      d.Decode(R"({"action":"T","xid":729,"lsn":"0/150D200","schema":"public","table":"t"})", &out)
          .ok());
  ASSERT_EQ(out.size(), 2u);
  const auto& t = std::get<pgoutput::Truncate>(out[1]);
  EXPECT_EQ(t.relation_ids, std::vector<pgoutput::Oid>{d.OidFor("public", "t")});
}

TEST(Wal2Json, ViewsOutliveTheInput) {
  Wal2JsonDecoder d;
  std::vector<Message> out;
  {
    std::string input = kInsert;
    ASSERT_TRUE(d.Decode(input, &out).ok());
    input.assign(input.size(), '#');
  }
  const auto c = Cols(std::get<pgoutput::Insert>(out[1]).new_tuple);
  EXPECT_EQ(c[2].data, "héllo \"q\" 😀");
}


// Plain strings are read in place, escaped ones unescaped: a key or name written with
// escapes means the same as written plainly, and both kinds of view stay valid together.
TEST(Wal2Json, EscapedKeysAndNamesReadLikePlainOnes) {
  Wal2JsonDecoder d;
  std::vector<Message> out;
  ASSERT_TRUE(
      d.Decode(R"({"\u0061ction":"I","xid":1,"timestamp":"2026-12-02 13:36:11+00","lsn":"0/1",)"
               R"("schema":"public","t\u0061ble":"t","columns":[)"
               R"({"n\u0061me":"id","type":"integer","typeoid":23,"value":7},)"
               R"({"name":"we\"ird","type":"text","typeoid":25,"val\u0075e":"a\\b"},)"
               R"({"name":"plain","type":"text","typeoid":25,"value":"no escapes"}],)"
               R"("pk":[{"name":"id","type":"integer","typeoid":23}]})",
               &out)
          .ok());
  ASSERT_EQ(out.size(), 2u);
  const auto& rel = std::get<pgoutput::Relation>(out[0]);
  EXPECT_EQ(rel.relation_name, "t");
  ASSERT_EQ(rel.columns.size(), 3u);
  EXPECT_EQ(rel.columns[0].name, "id");
  EXPECT_TRUE(rel.columns[0].is_key());
  EXPECT_EQ(rel.columns[1].name, "we\"ird");
  EXPECT_EQ(rel.columns[2].name, "plain");
  const auto c = Cols(std::get<pgoutput::Insert>(out[1]).new_tuple);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].data, "7");
  EXPECT_EQ(c[1].data, "a\\b");
  EXPECT_EQ(c[2].data, "no escapes");
}
TEST(Wal2Json, FeedsTheAssembler) {
  Wal2JsonDecoder d;
  pgoutput::TransactionAssembler a;
  pgoutput::RelationCache cache;
  std::vector<Message> out;
  for (const std::string& line :
       {std::string(R"({"action":"B","xid":1,"lsn":"0/100","nextlsn":"0/140"})"),
        std::string(kInsert),
        std::string(R"({"action":"C","xid":1,"lsn":"0/100","nextlsn":"0/140"})")}) {
    ASSERT_TRUE(d.Decode(line, &out).ok()) << line;
    for (const Message& m : out) {
      if (const auto* r = std::get_if<pgoutput::Relation>(&m)) (void)cache.Put(*r);
      if (const auto* i = std::get_if<pgoutput::Insert>(&m)) {
        EXPECT_TRUE(cache.FindForTuple(i->relation_id, i->new_tuple).ok());
      }
      auto e = a.Feed(m);
      ASSERT_TRUE(e.ok()) << e.status().ToString();
    }
  }
  EXPECT_EQ(a.last_commit_lsn(), Lsn(0x100));
}

TEST(Wal2Json, Errors) {
  Wal2JsonDecoder d;
  std::vector<Message> out;
  auto code = [&](std::string_view json) { return d.Decode(json, &out).code(); };
  Status st = d.Decode(R"({"action":"I","schema":"s","table":"t","columns":[{"name":"id",)", &out);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("offset"), std::string::npos) << st.message();
  st = d.Decode(R"({"action":"I","schema":"s","table":"t","columns":[{"name":"id","value":tru}]})",
                &out);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find("offset"), std::string::npos) << st.message();
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(code(""), StatusCode::kDataLoss);
  EXPECT_EQ(code("[]"), StatusCode::kDataLoss);
  EXPECT_EQ(code(R"({"action":"X"})"), StatusCode::kDataLoss);
  EXPECT_EQ(code(R"({"xid":1})"), StatusCode::kDataLoss);
  EXPECT_EQ(code(R"({"action":"B","lsn":"0/1"} {})"), StatusCode::kDataLoss);
  EXPECT_EQ(code(R"({"action":"B","lsn":"nope"})"), StatusCode::kDataLoss);
  EXPECT_EQ(code(R"({"action":"B","xid":1})"), StatusCode::kFailedPrecondition);
  EXPECT_EQ(code(R"({"action":"C","lsn":"0/1"})"), StatusCode::kFailedPrecondition);
  EXPECT_EQ(code(R"({"action":"I","schema":"s","table":"t","columns":[{"name":"a","value":[1]}]})"),
            StatusCode::kDataLoss);
  EXPECT_EQ(code(R"({"action":"I","schema":"s","table":"t","columns":[{"name":"a"}]})"),
            StatusCode::kDataLoss);
  EXPECT_EQ(code(R"({"action":"I","table":"t","columns":[]})"), StatusCode::kDataLoss);
  EXPECT_EQ(code(R"({"action":"D","schema":"s","table":"t"})"), StatusCode::kDataLoss);
  EXPECT_EQ(code("{\"action\":\"B\",\"lsn\":\"0/1\",\"x\":\"\xff\"}"), StatusCode::kDataLoss);
  // The decoder still works after errors.
  EXPECT_TRUE(d.Decode(kInsert, &out).ok());
}

TEST(Wal2Json, RequiredOptionsNameIncludeLsn) {
  bool found = false;
  for (const auto& [name, value] : kRequiredOptions) found |= name == "include-lsn" && value == "1";
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace walrelay::wal2json
