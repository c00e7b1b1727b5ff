#include "decoder/pgoutput.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "tests/decoder/wire_builder.h"

namespace walrelay::pgoutput {
namespace {

using testing::Binary;
using ::testing::HasSubstr;
using testing::Null;
using testing::Text;
using testing::Toast;
using testing::WireBuilder;
namespace wire = testing::wire;

DecodeOptions V(int version, bool in_stream = false, bool parallel = false) {
  return DecodeOptions{version, in_stream, parallel};
}

// Decoded messages borrow from their input: keep every input alive for the whole test run.
const std::string& Keep(std::string bytes) {
  static std::deque<std::string> kept;
  return kept.emplace_back(std::move(bytes));
}

// Borrows from `bytes`, which the caller keeps alive.
template <typename T>
T DecodeAs(const std::string& bytes, DecodeOptions options = V(1)) {
  Result<Message> r = Decode(bytes, options);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return T{};
  EXPECT_TRUE(std::holds_alternative<T>(*r)) << "variant index " << r->index();
  if (!std::holds_alternative<T>(*r)) return T{};
  return std::get<T>(std::move(*r));
}

// For temporaries: keeps a copy alive so the result's views stay valid.
template <typename T>
T DecodeAs(std::string&& bytes, DecodeOptions options = V(1)) {
  return DecodeAs<T>(Keep(std::move(bytes)), options);
}

Status DecodeStatus(const std::string& bytes, DecodeOptions options = V(1)) {
  return Decode(bytes, options).status();
}

std::vector<ColumnValue> Columns(const TupleView& t) {
  std::vector<ColumnValue> v;
  t.FillColumns(&v);
  return v;
}

}  // namespace

void PrintTo(const ColumnValue& v, std::ostream* os) {
  *os << "{" << static_cast<char>(v.kind) << ", \"" << v.data << "\"}";
}

namespace {

ColumnValue CV(ColumnKind k, std::string_view d = {}) { return ColumnValue{k, d}; }

bool Inside(std::string_view part, const std::string& whole) {
  return part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size();
}

TEST(PgoutputTest, Begin) {
  EXPECT_EQ(DecodeAs<Begin>(wire::Begin(0x16B374D848, 123456789, 731)),
            (Begin{Lsn(0x16B374D848), 123456789, 731}));
}

TEST(PgoutputTest, Commit) {
  EXPECT_EQ(DecodeAs<Commit>(wire::Commit(0x100, 0x180, -5)),
            (Commit{0, Lsn(0x100), Lsn(0x180), -5}));
}

TEST(PgoutputTest, Origin) {
  const std::string bytes = wire::Origin(0x42, "node_a");
  Origin o = DecodeAs<Origin>(bytes);
  EXPECT_EQ(o, (Origin{Lsn(0x42), "node_a"}));
  EXPECT_TRUE(Inside(o.name, bytes));
}

TEST(PgoutputTest, Relation) {
  const std::string bytes = wire::Relation({}, 16384, "public", "outbox", 'd',
                                           {{1, "id", 2950, -1}, {0, "kind", 1043, 68}});
  Relation r = DecodeAs<Relation>(bytes);
  Relation want;
  want.relation_id = 16384;
  want.namespace_name = "public";
  want.relation_name = "outbox";
  want.replica_identity = ReplicaIdentity::kDefault;
  want.columns = {{1, "id", 2950, -1}, {0, "kind", 1043, 68}};
  EXPECT_EQ(r, want);
  EXPECT_TRUE(r.columns[0].is_key());
  EXPECT_FALSE(r.columns[1].is_key());
  EXPECT_TRUE(Inside(r.relation_name, bytes));
  EXPECT_TRUE(Inside(r.columns[1].name, bytes));
}

TEST(PgoutputTest, RelationEmptyNamespaceIsPgCatalogAndAllIdentities) {
  for (char ident : {'d', 'n', 'f', 'i'}) {
    Relation r = DecodeAs<Relation>(wire::Relation({}, 1, "", "pg_class", ident, {}));
    EXPECT_EQ(r.namespace_name, "pg_catalog");
    EXPECT_EQ(static_cast<char>(r.replica_identity), ident);
    EXPECT_TRUE(r.columns.empty());
  }
}

TEST(PgoutputTest, Type) {
  EXPECT_EQ(DecodeAs<Type>(wire::Type({}, 90001, "public", "mood")),
            (Type{std::nullopt, 90001, "public", "mood"}));
  EXPECT_EQ(DecodeAs<Type>(wire::Type({}, 23, "", "int4")).namespace_name, "pg_catalog");
}

TEST(PgoutputTest, InsertAllColumnKinds) {
  const std::string bin("\x00\x01\xff", 3);
  const std::string bytes =
      wire::Insert({}, 16384, {Text("42"), Null(), Binary(bin), Text(""), Toast()});
  Insert ins = DecodeAs<Insert>(bytes);
  EXPECT_EQ(ins.xid, std::nullopt);
  EXPECT_EQ(ins.relation_id, 16384u);
  ASSERT_EQ(ins.new_tuple.size(), 5);
  EXPECT_EQ(Columns(ins.new_tuple),
            (std::vector<ColumnValue>{CV(ColumnKind::kText, "42"), CV(ColumnKind::kNull),
                                      CV(ColumnKind::kBinary, bin), CV(ColumnKind::kText, ""),
                                      CV(ColumnKind::kUnchanged)}));
  // Unchanged TOAST is "not sent": neither null nor a value.
  const ColumnValue toast = Columns(ins.new_tuple)[4];
  EXPECT_TRUE(toast.is_unchanged_toast());
  EXPECT_FALSE(toast.is_null());
  EXPECT_FALSE(toast.has_value());
  // Zero copy: values point into the input.
  for (const ColumnValue& c : ins.new_tuple) {
    if (c.has_value() && !c.data.empty()) {
      EXPECT_TRUE(Inside(c.data, bytes));
    }
  }
  EXPECT_EQ(std::distance(ins.new_tuple.begin(), ins.new_tuple.end()), 5);
}

TEST(PgoutputTest, FillColumnsReusesTheVector) {
  Insert ins = DecodeAs<Insert>(wire::Insert({}, 1, {Text("a"), Text("b")}));
  std::vector<ColumnValue> cols = {CV(ColumnKind::kNull), CV(ColumnKind::kNull),
                                   CV(ColumnKind::kNull)};
  ins.new_tuple.FillColumns(&cols);
  EXPECT_EQ(cols,
            (std::vector<ColumnValue>{CV(ColumnKind::kText, "a"), CV(ColumnKind::kText, "b")}));
}

TEST(PgoutputTest, UpdateWithoutOldTuple) {
  Update u = DecodeAs<Update>(wire::Update({}, 7, 0, {}, {Text("1"), Toast()}));
  EXPECT_EQ(u.relation_id, 7u);
  EXPECT_EQ(u.old_kind, OldTupleKind::kNone);
  EXPECT_TRUE(u.old_tuple.empty());
  EXPECT_EQ(Columns(u.new_tuple),
            (std::vector<ColumnValue>{CV(ColumnKind::kText, "1"), CV(ColumnKind::kUnchanged)}));
}

TEST(PgoutputTest, UpdateWithKeyAndWithOldTuple) {
  Update k =
      DecodeAs<Update>(wire::Update({}, 7, 'K', {Text("1"), Null()}, {Text("2"), Text("x")}));
  EXPECT_EQ(k.old_kind, OldTupleKind::kKey);
  EXPECT_EQ(Columns(k.old_tuple),
            (std::vector<ColumnValue>{CV(ColumnKind::kText, "1"), CV(ColumnKind::kNull)}));
  EXPECT_EQ(Columns(k.new_tuple),
            (std::vector<ColumnValue>{CV(ColumnKind::kText, "2"), CV(ColumnKind::kText, "x")}));

  Update o =
      DecodeAs<Update>(wire::Update({}, 7, 'O', {Text("1"), Text("y")}, {Text("1"), Toast()}));
  EXPECT_EQ(o.old_kind, OldTupleKind::kFull);
  EXPECT_EQ(Columns(o.old_tuple),
            (std::vector<ColumnValue>{CV(ColumnKind::kText, "1"), CV(ColumnKind::kText, "y")}));
  EXPECT_EQ(Columns(o.new_tuple),
            (std::vector<ColumnValue>{CV(ColumnKind::kText, "1"), CV(ColumnKind::kUnchanged)}));
}

TEST(PgoutputTest, Delete) {
  Delete k = DecodeAs<Delete>(wire::Delete({}, 9, 'K', {Text("1"), Null()}));
  EXPECT_EQ(k.relation_id, 9u);
  EXPECT_EQ(k.old_kind, OldTupleKind::kKey);
  EXPECT_EQ(Columns(k.old_tuple),
            (std::vector<ColumnValue>{CV(ColumnKind::kText, "1"), CV(ColumnKind::kNull)}));
  Delete o = DecodeAs<Delete>(wire::Delete({}, 9, 'O', {Binary("ab")}));
  EXPECT_EQ(o.old_kind, OldTupleKind::kFull);
  EXPECT_EQ(Columns(o.old_tuple), (std::vector<ColumnValue>{CV(ColumnKind::kBinary, "ab")}));
}

TEST(PgoutputTest, Truncate) {
  Truncate t = DecodeAs<Truncate>(wire::Truncate({}, 3, {16384, 16390}));
  EXPECT_EQ(t, (Truncate{std::nullopt, 3, {16384, 16390}}));
  EXPECT_TRUE(t.cascade());
  EXPECT_TRUE(t.restart_identity());
  Truncate none = DecodeAs<Truncate>(wire::Truncate({}, 0, {}));
  EXPECT_FALSE(none.cascade());
  EXPECT_TRUE(none.relation_ids.empty());
}

TEST(PgoutputTest, LogicalMessage) {
  const std::string content("{\"a\":1}\0tail", 12);  // content may hold NUL bytes
  const std::string bytes = wire::Message({}, 1, 0x2000, "outbox", content);
  LogicalMessage m = DecodeAs<LogicalMessage>(bytes);
  EXPECT_EQ(m, (LogicalMessage{std::nullopt, 1, Lsn(0x2000), "outbox", content}));
  EXPECT_TRUE(m.transactional());
  EXPECT_TRUE(Inside(m.content, bytes));
  LogicalMessage n = DecodeAs<LogicalMessage>(wire::Message({}, 0, 0x2000, "", ""));
  EXPECT_FALSE(n.transactional());
  EXPECT_EQ(n.prefix, "");
  EXPECT_EQ(n.content, "");
}

TEST(PgoutputTest, StreamControlMessages) {
  EXPECT_EQ(DecodeAs<StreamStart>(wire::StreamStart(900, 1), V(2)), (StreamStart{900, true}));
  EXPECT_EQ(DecodeAs<StreamStart>(wire::StreamStart(900, 0), V(2)), (StreamStart{900, false}));
  EXPECT_EQ(DecodeAs<StreamStop>(wire::StreamStop(), V(2)), StreamStop{});
  EXPECT_EQ(DecodeAs<StreamCommit>(wire::StreamCommit(900, 0x3000, 0x3050, 7), V(2)),
            (StreamCommit{900, 0, Lsn(0x3000), Lsn(0x3050), 7}));
  EXPECT_EQ(DecodeAs<StreamAbort>(wire::StreamAbort(900, 901), V(2)),
            (StreamAbort{900, 901, std::nullopt, std::nullopt}));
  // v4 without parallel streaming: no abort info.
  EXPECT_EQ(DecodeAs<StreamAbort>(wire::StreamAbort(900, 900), V(4)),
            (StreamAbort{900, 900, std::nullopt, std::nullopt}));
  StreamAbort p = DecodeAs<StreamAbort>(
      wire::StreamAbort(900, 900, std::make_pair(uint64_t{0x7000}, int64_t{13})),
      V(4, false, true));
  EXPECT_EQ(p, (StreamAbort{900, 900, Lsn(0x7000), 13}));
  EXPECT_TRUE(p.aborts_top_level());
}

TEST(PgoutputTest, ParallelAbortInfoIsRequiredWhenNegotiated) {
  EXPECT_EQ(DecodeStatus(wire::StreamAbort(900, 900), V(4, false, true)).code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(DecodeStatus(wire::StreamAbort(900, 900, std::make_pair(uint64_t{1}, int64_t{2})), V(4))
                .code(),
            StatusCode::kDataLoss);
}

TEST(PgoutputTest, StreamedChangesCarryXid) {
  const DecodeOptions s = V(2, true);
  EXPECT_EQ(DecodeAs<Relation>(wire::Relation(900, 1, "s", "t", 'f', {{0, "c", 25, -1}}), s).xid,
            900u);
  EXPECT_EQ(DecodeAs<Type>(wire::Type(900, 2, "s", "ty"), s), (Type{900, 2, "s", "ty"}));
  Insert i = DecodeAs<Insert>(wire::Insert(901, 1, {Text("v")}), s);
  EXPECT_EQ(i.xid, 901u);
  EXPECT_EQ(Columns(i.new_tuple), (std::vector<ColumnValue>{CV(ColumnKind::kText, "v")}));
  Update u = DecodeAs<Update>(wire::Update(901, 1, 'K', {Text("k")}, {Text("v")}), s);
  EXPECT_EQ(u.xid, 901u);
  EXPECT_EQ(u.old_kind, OldTupleKind::kKey);
  EXPECT_EQ(DecodeAs<Delete>(wire::Delete(901, 1, 'O', {Text("k")}), s).xid, 901u);
  EXPECT_EQ(DecodeAs<Truncate>(wire::Truncate(900, 1, {1}), s), (Truncate{900, 1, {1}}));
  EXPECT_EQ(DecodeAs<LogicalMessage>(wire::Message(900, 1, 5, "p", "c"), s),
            (LogicalMessage{900, 1, Lsn(5), "p", "c"}));
}

TEST(PgoutputTest, TwoPhaseMessages) {
  EXPECT_EQ(DecodeAs<BeginPrepare>(wire::BeginPrepare(0x4000, 0x4050, 9, 950, "gid-1"), V(3)),
            (BeginPrepare{Lsn(0x4000), Lsn(0x4050), 9, 950, "gid-1"}));
  EXPECT_EQ(DecodeAs<Prepare>(wire::PrepareLike('P', 0x4000, 0x4050, 9, 950, "g"), V(3)),
            (Prepare{0, Lsn(0x4000), Lsn(0x4050), 9, 950, "g"}));
  EXPECT_EQ(DecodeAs<CommitPrepared>(wire::CommitPrepared(0x5000, 0x5050, 10, 950, "g"), V(3)),
            (CommitPrepared{0, Lsn(0x5000), Lsn(0x5050), 10, 950, "g"}));
  EXPECT_EQ(
      DecodeAs<RollbackPrepared>(wire::RollbackPrepared(0x4050, 0x5100, 9, 11, 950, "g"), V(4)),
      (RollbackPrepared{0, Lsn(0x4050), Lsn(0x5100), 9, 11, 950, "g"}));
  EXPECT_EQ(DecodeAs<StreamPrepare>(wire::PrepareLike('p', 0x6000, 0x6050, 12, 900, "g2"), V(3)),
            (StreamPrepare{0, Lsn(0x6000), Lsn(0x6050), 12, 900, "g2"}));
}

TEST(PgoutputTest, AllSamplesDecodeToTheirType) {
  for (const testing::Sample& s : testing::ValidSamples()) {
    SCOPED_TRACE(s.name);
    Result<Message> r = Decode(s.bytes, V(s.protocol_version, s.in_stream, s.parallel_streaming));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(static_cast<char>(TypeOf(*r)), s.bytes[0]);
  }
}

TEST(PgoutputTest, MessageTypeNames) {
  EXPECT_EQ(MessageTypeName(MessageType::kInsert), "Insert");
  EXPECT_EQ(MessageTypeName(MessageType::kStreamCommit), "Stream Commit");
  EXPECT_EQ(MessageTypeName(static_cast<MessageType>('z')), "unknown");
}

// --- Malformed input ---------------------------------------------------------------------

TEST(PgoutputMalformedTest, TruncationAtEveryOffsetIsAnError) {
  for (const testing::Sample& s : testing::ValidSamples()) {
    for (size_t n = 0; n < s.bytes.size(); ++n) {
      SCOPED_TRACE(s.name + " cut at " + std::to_string(n));
      // A fresh copy of exactly n bytes so ASAN catches any read past the end.
      const std::string cut = s.bytes.substr(0, n);
      Status st = DecodeStatus(cut, V(s.protocol_version, s.in_stream, s.parallel_streaming));
      ASSERT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
      EXPECT_THAT(st.message(), HasSubstr("pgoutput"));
      if (n > 0) {
        EXPECT_THAT(st.message(), HasSubstr("offset"));
      }
    }
  }
}

TEST(PgoutputMalformedTest, TrailingBytesAreAnError) {
  for (const testing::Sample& s : testing::ValidSamples()) {
    SCOPED_TRACE(s.name);
    Status st =
        DecodeStatus(s.bytes + "x", V(s.protocol_version, s.in_stream, s.parallel_streaming));
    ASSERT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
    EXPECT_THAT(st.message(), HasSubstr("1 trailing bytes"));
    EXPECT_THAT(st.message(), HasSubstr("offset " + std::to_string(s.bytes.size())));
  }
}

TEST(PgoutputMalformedTest, ErrorNamesTypeOffsetAndField) {
  const std::string full = wire::Insert({}, 1, {Text("abc")});
  EXPECT_EQ(DecodeStatus(full.substr(0, 11)).message(),
            "pgoutput Insert: truncated at offset 9: need 4 bytes for column length, have 2");
  EXPECT_EQ(DecodeStatus(full.substr(0, 14)).message(),
            "pgoutput Insert: truncated at offset 13: need 3 bytes for column value, have 1");
  const std::string rel = wire::Relation({}, 1, "public", "t", 'd', {});
  EXPECT_EQ(DecodeStatus(rel.substr(0, 8)).message(),
            "pgoutput Relation: truncated at offset 5: unterminated string for namespace (3 "
            "bytes left)");
}

TEST(PgoutputMalformedTest, EmptyAndUnknownMessageTypes) {
  EXPECT_EQ(DecodeStatus("").code(), StatusCode::kDataLoss);
  for (char t : {'x', 'Z', '\0', 'w', 'k'}) {
    Status st = DecodeStatus(std::string(1, t) + "abcdefgh");
    EXPECT_EQ(st.code(), StatusCode::kDataLoss);
    EXPECT_THAT(st.message(), HasSubstr("unknown message type"));
  }
}

TEST(PgoutputMalformedTest, MessagesNewerThanTheSessionVersion) {
  for (const std::string& b : {wire::StreamStart(1, 1), wire::StreamStop(),
                               wire::StreamCommit(1, 2, 3, 4), wire::StreamAbort(1, 1)}) {
    Status st = DecodeStatus(b, V(1));
    EXPECT_EQ(st.code(), StatusCode::kDataLoss);
    EXPECT_THAT(st.message(), HasSubstr("needs protocol version 2"));
  }
  for (const std::string& b :
       {wire::BeginPrepare(1, 2, 3, 4, "g"), wire::PrepareLike('P', 1, 2, 3, 4, "g"),
        wire::CommitPrepared(1, 2, 3, 4, "g"), wire::RollbackPrepared(1, 2, 3, 4, 5, "g"),
        wire::PrepareLike('p', 1, 2, 3, 4, "g")}) {
    EXPECT_THAT(DecodeStatus(b, V(2)).message(), HasSubstr("needs protocol version 3"));
  }
}

TEST(PgoutputMalformedTest, BadOptionsAreInvalidArgument) {
  const std::string b = wire::Begin(1, 2, 3);
  EXPECT_EQ(DecodeStatus(b, V(0)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeStatus(b, V(5)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeStatus(b, V(1, true)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeStatus(b, V(3, false, true)).code(), StatusCode::kInvalidArgument);
}

TEST(PgoutputMalformedTest, UnknownColumnKind) {
  std::string b = wire::Insert({}, 1, {Text("a"), Null()});
  b[b.size() - 1] = 'x';
  Status st = DecodeStatus(b);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_THAT(st.message(), HasSubstr("unknown column kind 'x'"));
  EXPECT_THAT(st.message(), HasSubstr("at offset " + std::to_string(b.size() - 1)));
  EXPECT_THAT(st.message(), HasSubstr("column 1"));
  for (char kind : {'\0', 'N', 'T', 'B', 'U'}) {
    b[b.size() - 1] = kind;
    EXPECT_EQ(DecodeStatus(b).code(), StatusCode::kDataLoss) << kind;
  }
}

TEST(PgoutputMalformedTest, NegativeAndOversizedLengths) {
  // Column length -1 (0xffffffff).
  std::string b =
      WireBuilder().Byte('I').Int32(1).Byte('N').Int16(1).Byte('t').Int32(0xffffffff).str();
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("negative length -1"));
  // Column length larger than the rest.
  b = WireBuilder()
          .Byte('I')
          .Int32(1)
          .Byte('N')
          .Int16(1)
          .Byte('b')
          .Int32(0x7fffffff)
          .Bytes("ab")
          .str();
  EXPECT_THAT(DecodeStatus(b).message(),
              HasSubstr("need 2147483647 bytes for column value, have 2"));
  // More columns than PostgreSQL allows.
  b = WireBuilder().Byte('I').Int32(1).Byte('N').Int16(1665).str();
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("exceeds 1664"));
  b = WireBuilder().Byte('R').Int32(1).Str("s").Str("t").Byte('d').Int16(0xffff).str();
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("exceeds 1664"));
  // Column count larger than the bytes present.
  b = WireBuilder().Byte('D').Int32(1).Byte('K').Int16(3).Byte('n').str();
  EXPECT_EQ(DecodeStatus(b).code(), StatusCode::kDataLoss);
  // Message content length.
  b = WireBuilder().Byte('M').Int8(0).Int64(1).Str("p").Int32(0x80000000).str();
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("negative content length"));
  b = WireBuilder().Byte('M').Int8(0).Int64(1).Str("p").Int32(10).Bytes("abc").str();
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("need 10 bytes for content, have 3"));
  // Truncate relation count.
  b = WireBuilder().Byte('T').Int32(0xfffffffe).Int8(0).str();
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("negative relation count -2"));
  b = WireBuilder().Byte('T').Int32(1000000).Int8(0).Int32(1).str();
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("need 4000000 bytes for relation oids"));
}

TEST(PgoutputMalformedTest, NonZeroReservedFlags) {
  EXPECT_THAT(DecodeStatus(wire::Commit(1, 2, 3, 1)).message(), HasSubstr("unknown flags"));
  EXPECT_THAT(DecodeStatus(wire::StreamCommit(1, 2, 3, 4, 0x80), V(2)).message(),
              HasSubstr("unknown flags"));
  EXPECT_THAT(DecodeStatus(wire::PrepareLike('P', 1, 2, 3, 4, "g", 1), V(3)).message(),
              HasSubstr("unknown flags"));
  EXPECT_THAT(DecodeStatus(wire::PrepareLike('p', 1, 2, 3, 4, "g", 2), V(3)).message(),
              HasSubstr("unknown flags"));
  EXPECT_THAT(DecodeStatus(wire::CommitPrepared(1, 2, 3, 4, "g", 1), V(3)).message(),
              HasSubstr("unknown flags"));
  EXPECT_THAT(DecodeStatus(wire::RollbackPrepared(1, 2, 3, 4, 5, "g", 4), V(3)).message(),
              HasSubstr("unknown flags"));
  EXPECT_THAT(DecodeStatus(wire::Message({}, 2, 1, "p", "")).message(), HasSubstr("unknown flags"));
  EXPECT_THAT(DecodeStatus(wire::Truncate({}, 4, {1})).message(), HasSubstr("unknown option"));
  EXPECT_THAT(DecodeStatus(wire::Relation({}, 1, "s", "t", 'd', {{2, "c", 25, -1}})).message(),
              HasSubstr("unknown flags 0x02 for column 0"));
  EXPECT_THAT(DecodeStatus(wire::StreamStart(1, 2), V(2)).message(),
              HasSubstr("first segment flag must be 0 or 1"));
}

TEST(PgoutputMalformedTest, BadEnumsAndMarkers) {
  EXPECT_THAT(DecodeStatus(wire::Relation({}, 1, "s", "t", 'x', {})).message(),
              HasSubstr("unknown replica identity 'x'"));
  std::string ins = wire::Insert({}, 1, {Null()});
  ins[5] = 'K';
  EXPECT_THAT(DecodeStatus(ins).message(), HasSubstr("expected tuple marker 'N', got 'K'"));
  std::string upd = wire::Update({}, 1, 'K', {Null()}, {Null()});
  upd[5] = 'X';
  EXPECT_THAT(DecodeStatus(upd).message(), HasSubstr("expected tuple marker 'K', 'O' or 'N'"));
  upd = wire::Update({}, 1, 'K', {Null()}, {Null()});
  upd[9] = 'O';  // second marker must be 'N'
  EXPECT_THAT(DecodeStatus(upd).message(), HasSubstr("at offset 9: expected tuple marker 'N'"));
  std::string del = wire::Delete({}, 1, 'K', {Null()});
  del[5] = 'N';
  EXPECT_THAT(DecodeStatus(del).message(), HasSubstr("expected tuple marker 'K' or 'O'"));
}

TEST(PgoutputMalformedTest, UnsetLsns) {
  EXPECT_THAT(DecodeStatus(wire::Begin(0, 1, 2)).message(), HasSubstr("final lsn is not set"));
  EXPECT_THAT(DecodeStatus(wire::BeginPrepare(0, 1, 2, 3, "g"), V(3)).message(),
              HasSubstr("prepare lsn is not set"));
  EXPECT_THAT(DecodeStatus(wire::CommitPrepared(1, 0, 2, 3, "g"), V(3)).message(),
              HasSubstr("end lsn is not set"));
}

TEST(PgoutputMalformedTest, UnterminatedStrings) {
  std::string o = wire::Origin(1, "abc");
  o.pop_back();
  EXPECT_THAT(DecodeStatus(o).message(), HasSubstr("unterminated string for origin name"));
}

TEST(PgoutputMalformedTest, EverySingleByteFlipNeverCrashes) {
  // Not every flip is an error (a flipped value byte is still valid), but none may crash
  // or read out of bounds (run under ASAN/UBSAN via WALRELAY_SANITIZE or the fuzzer).
  for (const testing::Sample& s : testing::ValidSamples()) {
    for (size_t i = 0; i < s.bytes.size(); ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        std::string b = s.bytes;
        b[i] = static_cast<char>(b[i] ^ (1 << bit));
        for (int v = 1; v <= 4; ++v) {
          for (bool st : {false, true}) {
            if (st && v < 2) continue;
            Result<Message> r = Decode(b, V(v, st, v == 4 && bit == 0));
            if (r.ok()) (void)TypeOf(*r);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace walrelay::pgoutput
