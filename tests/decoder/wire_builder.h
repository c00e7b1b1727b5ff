// Test-only builder of pgoutput wire bytes: big-endian integers, NUL-terminated strings,
// and one helper per message type laid out as in PostgreSQL's proto.c. Used by the unit
// tests, the seed-corpus generator and the benchmark. Not part of any library.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace walrelay::pgoutput::testing {

class WireBuilder {
 public:
  WireBuilder& Byte(char c) {
    out_.push_back(c);
    return *this;
  }
  WireBuilder& Int8(uint8_t v) { return Byte(static_cast<char>(v)); }
  WireBuilder& Int16(uint16_t v) { return BigEndian(v, 2); }
  WireBuilder& Int32(uint32_t v) { return BigEndian(v, 4); }
  WireBuilder& Int64(uint64_t v) { return BigEndian(v, 8); }
  // NUL-terminated.
  WireBuilder& Str(std::string_view s) {
    out_.append(s);
    out_.push_back('\0');
    return *this;
  }
  WireBuilder& Bytes(std::string_view s) {
    out_.append(s);
    return *this;
  }
  WireBuilder& Xid(std::optional<uint32_t> xid) {
    if (xid) Int32(*xid);
    return *this;
  }
  const std::string& str() const { return out_; }

 private:
  WireBuilder& BigEndian(uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  std::string out_;
};

// One TupleData column: kind 'n'/'u' (no value) or 't'/'b' with a value.
struct Col {
  char kind;
  std::string value;
};
inline Col Null() { return {'n', ""}; }
inline Col Toast() { return {'u', ""}; }
inline Col Text(std::string v) { return {'t', std::move(v)}; }
inline Col Binary(std::string v) { return {'b', std::move(v)}; }

inline WireBuilder& AppendTuple(WireBuilder& b, const std::vector<Col>& cols) {
  b.Int16(static_cast<uint16_t>(cols.size()));
  for (const Col& c : cols) {
    b.Byte(c.kind);
    if (c.kind == 't' || c.kind == 'b') {
      b.Int32(static_cast<uint32_t>(c.value.size())).Bytes(c.value);
    }
  }
  return b;
}

struct RelCol {
  uint8_t flags;
  std::string name;
  uint32_t type_oid;
  int32_t typmod;
};

namespace wire {

inline std::string Begin(uint64_t final_lsn, int64_t ts, uint32_t xid) {
  return WireBuilder().Byte('B').Int64(final_lsn).Int64(ts).Int32(xid).str();
}
inline std::string Commit(uint64_t commit_lsn, uint64_t end_lsn, int64_t ts, uint8_t flags = 0) {
  return WireBuilder().Byte('C').Int8(flags).Int64(commit_lsn).Int64(end_lsn).Int64(ts).str();
}
inline std::string Origin(uint64_t lsn, std::string_view name) {
  return WireBuilder().Byte('O').Int64(lsn).Str(name).str();
}
inline std::string Relation(std::optional<uint32_t> xid, uint32_t oid, std::string_view ns,
                            std::string_view name, char ident, const std::vector<RelCol>& cols) {
  WireBuilder b;
  b.Byte('R').Xid(xid).Int32(oid).Str(ns).Str(name).Byte(ident);
  b.Int16(static_cast<uint16_t>(cols.size()));
  for (const RelCol& c : cols) {
    b.Int8(c.flags).Str(c.name).Int32(c.type_oid).Int32(static_cast<uint32_t>(c.typmod));
  }
  return b.str();
}
inline std::string Type(std::optional<uint32_t> xid, uint32_t oid, std::string_view ns,
                        std::string_view name) {
  return WireBuilder().Byte('Y').Xid(xid).Int32(oid).Str(ns).Str(name).str();
}
inline std::string Insert(std::optional<uint32_t> xid, uint32_t oid, const std::vector<Col>& t) {
  WireBuilder b;
  b.Byte('I').Xid(xid).Int32(oid).Byte('N');
  return AppendTuple(b, t).str();
}
// old_kind 0 for no old tuple.
inline std::string Update(std::optional<uint32_t> xid, uint32_t oid, char old_kind,
                          const std::vector<Col>& old_tuple, const std::vector<Col>& new_tuple) {
  WireBuilder b;
  b.Byte('U').Xid(xid).Int32(oid);
  if (old_kind != 0) AppendTuple(b.Byte(old_kind), old_tuple);
  b.Byte('N');
  return AppendTuple(b, new_tuple).str();
}
inline std::string Delete(std::optional<uint32_t> xid, uint32_t oid, char old_kind,
                          const std::vector<Col>& old_tuple) {
  WireBuilder b;
  b.Byte('D').Xid(xid).Int32(oid).Byte(old_kind);
  return AppendTuple(b, old_tuple).str();
}
inline std::string Truncate(std::optional<uint32_t> xid, uint8_t options,
                            const std::vector<uint32_t>& oids) {
  WireBuilder b;
  b.Byte('T').Xid(xid).Int32(static_cast<uint32_t>(oids.size())).Int8(options);
  for (uint32_t o : oids) b.Int32(o);
  return b.str();
}
inline std::string Message(std::optional<uint32_t> xid, uint8_t flags, uint64_t lsn,
                           std::string_view prefix, std::string_view content) {
  return WireBuilder()
      .Byte('M')
      .Xid(xid)
      .Int8(flags)
      .Int64(lsn)
      .Str(prefix)
      .Int32(static_cast<uint32_t>(content.size()))
      .Bytes(content)
      .str();
}
inline std::string StreamStart(uint32_t xid, uint8_t first) {
  return WireBuilder().Byte('S').Int32(xid).Int8(first).str();
}
inline std::string StreamStop() { return "E"; }
inline std::string StreamCommit(uint32_t xid, uint64_t commit_lsn, uint64_t end_lsn, int64_t ts,
                                uint8_t flags = 0) {
  return WireBuilder()
      .Byte('c')
      .Int32(xid)
      .Int8(flags)
      .Int64(commit_lsn)
      .Int64(end_lsn)
      .Int64(ts)
      .str();
}
inline std::string StreamAbort(uint32_t xid, uint32_t subxid,
                               std::optional<std::pair<uint64_t, int64_t>> abort_info = {}) {
  WireBuilder b;
  b.Byte('A').Int32(xid).Int32(subxid);
  if (abort_info) b.Int64(abort_info->first).Int64(static_cast<uint64_t>(abort_info->second));
  return b.str();
}
inline std::string BeginPrepare(uint64_t prepare_lsn, uint64_t end_lsn, int64_t ts, uint32_t xid,
                                std::string_view gid) {
  return WireBuilder()
      .Byte('b')
      .Int64(prepare_lsn)
      .Int64(end_lsn)
      .Int64(static_cast<uint64_t>(ts))
      .Int32(xid)
      .Str(gid)
      .str();
}
// 'P' (Prepare) or 'p' (Stream Prepare).
inline std::string PrepareLike(char type, uint64_t prepare_lsn, uint64_t end_lsn, int64_t ts,
                               uint32_t xid, std::string_view gid, uint8_t flags = 0) {
  return WireBuilder()
      .Byte(type)
      .Int8(flags)
      .Int64(prepare_lsn)
      .Int64(end_lsn)
      .Int64(static_cast<uint64_t>(ts))
      .Int32(xid)
      .Str(gid)
      .str();
}
inline std::string CommitPrepared(uint64_t commit_lsn, uint64_t end_lsn, int64_t ts, uint32_t xid,
                                  std::string_view gid, uint8_t flags = 0) {
  return WireBuilder()
      .Byte('K')
      .Int8(flags)
      .Int64(commit_lsn)
      .Int64(end_lsn)
      .Int64(static_cast<uint64_t>(ts))
      .Int32(xid)
      .Str(gid)
      .str();
}
inline std::string RollbackPrepared(uint64_t prepare_end_lsn, uint64_t rollback_end_lsn,
                                    int64_t prepare_ts, int64_t rollback_ts, uint32_t xid,
                                    std::string_view gid, uint8_t flags = 0) {
  return WireBuilder()
      .Byte('r')
      .Int8(flags)
      .Int64(prepare_end_lsn)
      .Int64(rollback_end_lsn)
      .Int64(static_cast<uint64_t>(prepare_ts))
      .Int64(static_cast<uint64_t>(rollback_ts))
      .Int32(xid)
      .Str(gid)
      .str();
}

// The documented outbox table's Relation (src/relay/core/schema.h, OutboxTableDdl): id,
// event_id, aggregate_type, aggregate_id, topic, event_type, payload, headers, created_at.
inline std::string OutboxRelation(uint32_t oid) {
  return Relation({}, oid, "public", "outbox", 'd',
                  {{1, "id", 20, -1},
                   {0, "event_id", 2950, -1},
                   {0, "aggregate_type", 25, -1},
                   {0, "aggregate_id", 25, -1},
                   {0, "topic", 25, -1},
                   {0, "event_type", 25, -1},
                   {0, "payload", 3802, -1},
                   {0, "headers", 3802, -1},
                   {0, "created_at", 1184, -1}});
}

}  // namespace wire

// A named valid message and the options to decode it with: the table the truncation,
// trailing-garbage and corpus tests walk.
struct Sample {
  std::string name;
  std::string bytes;
  int protocol_version = 1;
  bool in_stream = false;
  bool parallel_streaming = false;
};

inline std::vector<Sample> ValidSamples() {
  const std::vector<RelCol> outbox_cols = {
      {1, "id", 2950, -1},          {0, "aggregate_type", 25, -1}, {0, "aggregate_id", 25, -1},
      {0, "event_type", 1043, 259}, {0, "payload", 3802, -1},
  };
  const std::vector<Col> row = {Text("6f1c"), Text("order"), Text("42"), Null(),
                                Binary(std::string("\x01{}", 3))};
  std::vector<Sample> s;
  for (int v = 1; v <= 4; ++v) {
    s.push_back({"begin", wire::Begin(0x16B374D848, 700000000000000, 731), v});
    s.push_back({"commit", wire::Commit(0x16B374D848, 0x16B374D900, 700000000000000), v});
    s.push_back({"origin", wire::Origin(0x100, "node_a"), v});
    s.push_back({"relation", wire::Relation({}, 16384, "public", "outbox", 'd', outbox_cols), v});
    s.push_back({"relation_full", wire::Relation({}, 16385, "", "t", 'f', {}), v});
    s.push_back({"type", wire::Type({}, 90001, "public", "mood"), v});
    s.push_back({"insert", wire::Insert({}, 16384, row), v});
    s.push_back({"insert_empty", wire::Insert({}, 16384, {}), v});
    s.push_back({"update_new_only", wire::Update({}, 16384, 0, {}, {Text("a"), Toast()}), v});
    s.push_back({"update_key",
                 wire::Update({}, 16384, 'K', {Text("1"), Null()}, {Text("1"), Text("b")}), v});
    s.push_back({"update_old",
                 wire::Update({}, 16384, 'O', {Text("1"), Text("a")}, {Text("1"), Toast()}), v});
    s.push_back({"delete_key", wire::Delete({}, 16384, 'K', {Text("1"), Null()}), v});
    s.push_back({"delete_old", wire::Delete({}, 16384, 'O', {Text("1"), Binary("xy")}), v});
    s.push_back({"truncate", wire::Truncate({}, 3, {16384, 16390}), v});
    s.push_back({"message_tx", wire::Message({}, 1, 0x2000, "outbox", "{\"a\":1}"), v});
    s.push_back({"message_nontx", wire::Message({}, 0, 0x2000, "hb", ""), v});
    if (v >= 2) {
      s.push_back({"stream_start", wire::StreamStart(900, 1), v});
      s.push_back({"stream_stop", wire::StreamStop(), v});
      s.push_back({"stream_commit", wire::StreamCommit(900, 0x3000, 0x3050, 7), v});
      s.push_back({"stream_abort", wire::StreamAbort(900, 901), v});
      s.push_back({"relation_stream",
                   wire::Relation(900, 16384, "public", "outbox", 'i', outbox_cols), v, true});
      s.push_back({"type_stream", wire::Type(900, 90001, "", "int4"), v, true});
      s.push_back({"insert_stream", wire::Insert(901, 16384, row), v, true});
      s.push_back(
          {"update_stream", wire::Update(901, 16384, 'K', {Text("1")}, {Text("2")}), v, true});
      s.push_back({"delete_stream", wire::Delete(901, 16384, 'O', {Text("1")}), v, true});
      s.push_back({"truncate_stream", wire::Truncate(900, 0, {16384}), v, true});
      s.push_back({"message_stream", wire::Message(900, 1, 0x2100, "p", "c"), v, true});
    }
    if (v >= 3) {
      s.push_back({"begin_prepare", wire::BeginPrepare(0x4000, 0x4050, 9, 950, "gid-1"), v});
      s.push_back({"prepare", wire::PrepareLike('P', 0x4000, 0x4050, 9, 950, "gid-1"), v});
      s.push_back({"commit_prepared", wire::CommitPrepared(0x5000, 0x5050, 10, 950, "gid-1"), v});
      s.push_back(
          {"rollback_prepared", wire::RollbackPrepared(0x4050, 0x5100, 9, 11, 950, "gid-1"), v});
      s.push_back({"stream_prepare", wire::PrepareLike('p', 0x6000, 0x6050, 12, 900, "g2"), v});
    }
    if (v >= 4) {
      s.push_back({"stream_abort_parallel",
                   wire::StreamAbort(900, 900, std::make_pair(uint64_t{0x7000}, int64_t{13})), v,
                   false, true});
    }
  }
  for (Sample& x : s) x.name += "_v" + std::to_string(x.protocol_version);
  return s;
}

}  // namespace walrelay::pgoutput::testing
