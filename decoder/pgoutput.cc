#include "decoder/pgoutput.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <utility>

namespace walrelay::pgoutput {

// Gives the parser below access to TupleView's private fields.
struct TupleParser {
  static TupleView Make(std::string_view columns, uint16_t num_columns) {
    TupleView view;
    view.columns_ = columns;
    view.num_columns_ = num_columns;
    return view;
  }
};

namespace {

using decoder::ByteReader;

// MaxTupleAttributeNumber in PostgreSQL: no tuple or relation has more columns.
constexpr uint16_t kMaxColumns = 1664;

// The message being parsed: its type (for error text) and a reader over its bytes.
struct Ctx {
  MessageType type;
  ByteReader r;
  const DecodeOptions& options;
};

std::string Prefix(MessageType type) {
  std::string s = "pgoutput ";
  s += MessageTypeName(type);
  s += ": ";
  return s;
}

// "'x' (0x78)" for printable bytes, "0x01" otherwise.
std::string ByteText(uint8_t b) {
  char buf[16];
  if (b >= 0x20 && b < 0x7f) {
    std::snprintf(buf, sizeof(buf), "'%c' (0x%02x)", static_cast<char>(b), b);
  } else {
    std::snprintf(buf, sizeof(buf), "0x%02x", b);
  }
  return buf;
}

[[nodiscard]] Status Truncated(const Ctx& c, std::string_view field) {
  return DataLossError(Prefix(c.type) + c.r.ErrorText(field));
}

[[nodiscard]] Status Malformed(const Ctx& c, size_t offset, std::string_view what) {
  std::string s = Prefix(c.type) + "at offset " + std::to_string(offset) + ": ";
  s += what;
  return DataLossError(std::move(s));
}

// Reads into `call`'s target or returns the truncation error naming `field`.
#define PG_READ(call, field)                 \
  do {                                       \
    if (!(call)) return Truncated(c, field); \
  } while (0)

Status ReadLsn(Ctx& c, Lsn* out, std::string_view field, bool must_be_valid) {
  const size_t at = c.r.offset();
  uint64_t v;
  PG_READ(c.r.ReadUint64(&v), field);
  if (must_be_valid && v == 0) {
    return Malformed(c, at, std::string(field) + " is not set (0/0)");
  }
  *out = Lsn(v);
  return Status::Ok();
}

Status ReadZeroFlags(Ctx& c, uint8_t* out) {
  const size_t at = c.r.offset();
  PG_READ(c.r.ReadUint8(out), "flags");
  if (*out != 0) return Malformed(c, at, "unknown flags " + ByteText(*out) + " (must be 0)");
  return Status::Ok();
}

Status ReadStreamXid(Ctx& c, std::optional<Xid>* out) {
  if (!c.options.in_stream) {
    out->reset();
    return Status::Ok();
  }
  Xid xid;
  PG_READ(c.r.ReadUint32(&xid), "xid");
  *out = xid;
  return Status::Ok();
}

Status ReadNamespace(Ctx& c, std::string_view* out) {
  PG_READ(c.r.ReadString(out), "namespace");
  if (out->empty()) *out = "pg_catalog";
  return Status::Ok();
}

constexpr size_t kNotWellFormed = SIZE_MAX;

// The byte length of `n` well-formed columns at the start of `bytes` (kind 'n' or 'u', or
// 't' / 'b' with a non-negative Int32 length and that many bytes), else kNotWellFormed.
size_t WellFormedTupleLength(std::string_view bytes, uint16_t n) {
  const char* const begin = bytes.data();
  const char* const end = begin + bytes.size();
  const char* p = begin;
  for (uint16_t i = 0; i < n; ++i) {
    if (p == end) return kNotWellFormed;
    const char kind = *p++;
    if (kind == static_cast<char>(ColumnKind::kText) ||
        kind == static_cast<char>(ColumnKind::kBinary)) {
      if (end - p < 4) return kNotWellFormed;
      const uint32_t len = decoder::LoadBigEndian32(p);
      p += 4;
      if (len > static_cast<uint32_t>(INT32_MAX) || static_cast<size_t>(end - p) < len) {
        return kNotWellFormed;
      }
      p += len;
    } else if (kind != static_cast<char>(ColumnKind::kNull) &&
               kind != static_cast<char>(ColumnKind::kUnchanged)) {
      return kNotWellFormed;
    }
  }
  return static_cast<size_t>(p - begin);
}

Status ReadTuple(Ctx& c, std::string_view which, TupleView* out) {
  const size_t count_at = c.r.offset();
  uint16_t n;
  PG_READ(c.r.ReadUint16(&n), "column count");
  if (n > kMaxColumns) {
    return Malformed(c, count_at,
                     std::string(which) + " column count " + std::to_string(n) + " exceeds " +
                         std::to_string(kMaxColumns));
  }
  const size_t start = c.r.offset();
  // One tight pass over a well-formed tuple (every tuple a server sends); anything it does
  // not accept is read again by the checked loop below, which says what is wrong.
  if (const size_t length = WellFormedTupleLength(c.r.rest(), n); length != kNotWellFormed) {
    c.r.Skip(length);
    *out = TupleParser::Make(c.r.data().substr(start, length), n);
    return Status::Ok();
  }
  for (uint16_t i = 0; i < n; ++i) {
    const size_t at = c.r.offset();
    uint8_t kind;
    PG_READ(c.r.ReadUint8(&kind), "column kind");
    switch (static_cast<ColumnKind>(kind)) {
      case ColumnKind::kNull:
      case ColumnKind::kUnchanged:
        break;
      case ColumnKind::kText:
      case ColumnKind::kBinary: {
        const size_t len_at = c.r.offset();
        int32_t len;
        PG_READ(c.r.ReadInt32(&len), "column length");
        if (len < 0) {
          return Malformed(c, len_at,
                           "negative length " + std::to_string(len) + " for column " +
                               std::to_string(i) + " of the " + std::string(which));
        }
        PG_READ(c.r.Skip(static_cast<size_t>(len)), "column value");
        break;
      }
      default:
        return Malformed(c, at,
                         "unknown column kind " + ByteText(kind) + " for column " +
                             std::to_string(i) + " of the " + std::string(which));
    }
  }
  *out = TupleParser::Make(c.r.data().substr(start, c.r.offset() - start), n);
  return Status::Ok();
}

// Reads the tuple marker byte ('N', 'K' or 'O') and checks it is one of `allowed`.
Status ReadMarker(Ctx& c, std::string_view allowed, char* out) {
  const size_t at = c.r.offset();
  uint8_t b;
  PG_READ(c.r.ReadUint8(&b), "tuple marker");
  if (b == 0 || allowed.find(static_cast<char>(b)) == std::string_view::npos) {
    std::string what = "expected tuple marker ";
    for (size_t i = 0; i < allowed.size(); ++i) {
      if (i > 0) what += (i + 1 == allowed.size()) ? " or " : ", ";
      what += '\'';
      what += allowed[i];
      what += '\'';
    }
    return Malformed(c, at, what + ", got " + ByteText(b));
  }
  *out = static_cast<char>(b);
  return Status::Ok();
}

Status ParseBegin(Ctx& c, Message* out) {
  Begin& m = out->emplace<Begin>();
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.final_lsn, "final lsn", true));
  PG_READ(c.r.ReadInt64(&m.commit_time), "commit timestamp");
  PG_READ(c.r.ReadUint32(&m.xid), "xid");
  return Status::Ok();
}

Status ParseCommit(Ctx& c, Message* out) {
  Commit& m = out->emplace<Commit>();
  WALRELAY_RETURN_IF_ERROR(ReadZeroFlags(c, &m.flags));
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.commit_lsn, "commit lsn", false));
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.end_lsn, "end lsn", false));
  PG_READ(c.r.ReadInt64(&m.commit_time), "commit timestamp");
  return Status::Ok();
}

Status ParseOrigin(Ctx& c, Message* out) {
  Origin& m = out->emplace<Origin>();
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.origin_lsn, "origin lsn", false));
  PG_READ(c.r.ReadString(&m.name), "origin name");
  return Status::Ok();
}

Status ParseRelation(Ctx& c, Message* out) {
  Relation& m = out->emplace<Relation>();
  WALRELAY_RETURN_IF_ERROR(ReadStreamXid(c, &m.xid));
  PG_READ(c.r.ReadUint32(&m.relation_id), "relation oid");
  WALRELAY_RETURN_IF_ERROR(ReadNamespace(c, &m.namespace_name));
  PG_READ(c.r.ReadString(&m.relation_name), "relation name");
  const size_t ident_at = c.r.offset();
  uint8_t ident;
  PG_READ(c.r.ReadUint8(&ident), "replica identity");
  switch (static_cast<ReplicaIdentity>(ident)) {
    case ReplicaIdentity::kDefault:
    case ReplicaIdentity::kNothing:
    case ReplicaIdentity::kFull:
    case ReplicaIdentity::kIndex:
      m.replica_identity = static_cast<ReplicaIdentity>(ident);
      break;
    default:
      return Malformed(c, ident_at, "unknown replica identity " + ByteText(ident));
  }
  const size_t count_at = c.r.offset();
  uint16_t n;
  PG_READ(c.r.ReadUint16(&n), "column count");
  if (n > kMaxColumns) {
    return Malformed(
        c, count_at,
        "column count " + std::to_string(n) + " exceeds " + std::to_string(kMaxColumns));
  }
  // Each column takes at least 10 bytes; do not reserve for columns that cannot be there.
  m.columns.reserve(std::min<size_t>(n, c.r.remaining() / 10));
  for (uint16_t i = 0; i < n; ++i) {
    RelationColumn& col = m.columns.emplace_back();
    const size_t flags_at = c.r.offset();
    PG_READ(c.r.ReadUint8(&col.flags), "column flags");
    if ((col.flags & ~RelationColumn::kFlagKey) != 0) {
      return Malformed(c, flags_at,
                       "unknown flags " + ByteText(col.flags) + " for column " + std::to_string(i));
    }
    PG_READ(c.r.ReadString(&col.name), "column name");
    PG_READ(c.r.ReadUint32(&col.type_oid), "column type oid");
    PG_READ(c.r.ReadInt32(&col.type_modifier), "column type modifier");
  }
  return Status::Ok();
}

Status ParseType(Ctx& c, Message* out) {
  Type& m = out->emplace<Type>();
  WALRELAY_RETURN_IF_ERROR(ReadStreamXid(c, &m.xid));
  PG_READ(c.r.ReadUint32(&m.type_oid), "type oid");
  WALRELAY_RETURN_IF_ERROR(ReadNamespace(c, &m.namespace_name));
  PG_READ(c.r.ReadString(&m.type_name), "type name");
  return Status::Ok();
}

Status ParseInsert(Ctx& c, Message* out) {
  Insert& m = out->emplace<Insert>();
  WALRELAY_RETURN_IF_ERROR(ReadStreamXid(c, &m.xid));
  PG_READ(c.r.ReadUint32(&m.relation_id), "relation oid");
  char marker;
  WALRELAY_RETURN_IF_ERROR(ReadMarker(c, "N", &marker));
  return ReadTuple(c, "new tuple", &m.new_tuple);
}

Status ParseUpdate(Ctx& c, Message* out) {
  Update& m = out->emplace<Update>();
  WALRELAY_RETURN_IF_ERROR(ReadStreamXid(c, &m.xid));
  PG_READ(c.r.ReadUint32(&m.relation_id), "relation oid");
  char marker;
  WALRELAY_RETURN_IF_ERROR(ReadMarker(c, "KON", &marker));
  if (marker != 'N') {
    m.old_kind = static_cast<OldTupleKind>(marker);
    WALRELAY_RETURN_IF_ERROR(ReadTuple(c, "old tuple", &m.old_tuple));
    WALRELAY_RETURN_IF_ERROR(ReadMarker(c, "N", &marker));
  }
  return ReadTuple(c, "new tuple", &m.new_tuple);
}

Status ParseDelete(Ctx& c, Message* out) {
  Delete& m = out->emplace<Delete>();
  WALRELAY_RETURN_IF_ERROR(ReadStreamXid(c, &m.xid));
  PG_READ(c.r.ReadUint32(&m.relation_id), "relation oid");
  char marker;
  WALRELAY_RETURN_IF_ERROR(ReadMarker(c, "KO", &marker));
  m.old_kind = static_cast<OldTupleKind>(marker);
  return ReadTuple(c, "old tuple", &m.old_tuple);
}

Status ParseTruncate(Ctx& c, Message* out) {
  Truncate& m = out->emplace<Truncate>();
  WALRELAY_RETURN_IF_ERROR(ReadStreamXid(c, &m.xid));
  const size_t count_at = c.r.offset();
  int32_t n;
  PG_READ(c.r.ReadInt32(&n), "relation count");
  if (n < 0) return Malformed(c, count_at, "negative relation count " + std::to_string(n));
  const size_t options_at = c.r.offset();
  PG_READ(c.r.ReadUint8(&m.options), "options");
  if ((m.options & ~(Truncate::kOptionCascade | Truncate::kOptionRestartIdentity)) != 0) {
    return Malformed(c, options_at, "unknown option bits " + ByteText(m.options));
  }
  std::string_view ids;
  PG_READ(c.r.ReadBytes(static_cast<size_t>(n) * 4, &ids), "relation oids");
  m.relation_ids.reserve(static_cast<size_t>(n));
  for (size_t i = 0; i < ids.size(); i += 4) {
    m.relation_ids.push_back(decoder::LoadBigEndian32(ids.data() + i));
  }
  return Status::Ok();
}

Status ParseMessage(Ctx& c, Message* out) {
  LogicalMessage& m = out->emplace<LogicalMessage>();
  WALRELAY_RETURN_IF_ERROR(ReadStreamXid(c, &m.xid));
  const size_t flags_at = c.r.offset();
  PG_READ(c.r.ReadUint8(&m.flags), "flags");
  if ((m.flags & ~LogicalMessage::kFlagTransactional) != 0) {
    return Malformed(c, flags_at, "unknown flags " + ByteText(m.flags));
  }
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.lsn, "message lsn", false));
  PG_READ(c.r.ReadString(&m.prefix), "prefix");
  const size_t len_at = c.r.offset();
  int32_t len;
  PG_READ(c.r.ReadInt32(&len), "content length");
  if (len < 0) return Malformed(c, len_at, "negative content length " + std::to_string(len));
  PG_READ(c.r.ReadBytes(static_cast<size_t>(len), &m.content), "content");
  return Status::Ok();
}

Status ParseStreamStart(Ctx& c, Message* out) {
  StreamStart& m = out->emplace<StreamStart>();
  PG_READ(c.r.ReadUint32(&m.xid), "xid");
  const size_t at = c.r.offset();
  uint8_t first;
  PG_READ(c.r.ReadUint8(&first), "first segment flag");
  if (first > 1)
    return Malformed(c, at, "first segment flag must be 0 or 1, got " + ByteText(first));
  m.first_segment = first == 1;
  return Status::Ok();
}

Status ParseStreamCommit(Ctx& c, Message* out) {
  StreamCommit& m = out->emplace<StreamCommit>();
  PG_READ(c.r.ReadUint32(&m.xid), "xid");
  WALRELAY_RETURN_IF_ERROR(ReadZeroFlags(c, &m.flags));
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.commit_lsn, "commit lsn", false));
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.end_lsn, "end lsn", false));
  PG_READ(c.r.ReadInt64(&m.commit_time), "commit timestamp");
  return Status::Ok();
}

Status ParseStreamAbort(Ctx& c, Message* out) {
  StreamAbort& m = out->emplace<StreamAbort>();
  PG_READ(c.r.ReadUint32(&m.xid), "xid");
  PG_READ(c.r.ReadUint32(&m.subxact_xid), "subtransaction xid");
  if (c.options.parallel_streaming) {
    Lsn lsn;
    WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &lsn, "abort lsn", false));
    PgTimestamp time;
    PG_READ(c.r.ReadInt64(&time), "abort timestamp");
    m.abort_lsn = lsn;
    m.abort_time = time;
  }
  return Status::Ok();
}

Status ParseBeginPrepare(Ctx& c, Message* out) {
  BeginPrepare& m = out->emplace<BeginPrepare>();
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.prepare_lsn, "prepare lsn", true));
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.end_lsn, "end lsn", true));
  PG_READ(c.r.ReadInt64(&m.prepare_time), "prepare timestamp");
  PG_READ(c.r.ReadUint32(&m.xid), "xid");
  PG_READ(c.r.ReadString(&m.gid), "gid");
  return Status::Ok();
}

// Prepare and Stream Prepare share a layout.
template <typename M>
Status ParsePrepareLike(Ctx& c, Message* out) {
  M& m = out->emplace<M>();
  WALRELAY_RETURN_IF_ERROR(ReadZeroFlags(c, &m.flags));
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.prepare_lsn, "prepare lsn", true));
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.end_lsn, "end lsn", true));
  PG_READ(c.r.ReadInt64(&m.prepare_time), "prepare timestamp");
  PG_READ(c.r.ReadUint32(&m.xid), "xid");
  PG_READ(c.r.ReadString(&m.gid), "gid");
  return Status::Ok();
}

Status ParseCommitPrepared(Ctx& c, Message* out) {
  CommitPrepared& m = out->emplace<CommitPrepared>();
  WALRELAY_RETURN_IF_ERROR(ReadZeroFlags(c, &m.flags));
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.commit_lsn, "commit lsn", true));
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.end_lsn, "end lsn", true));
  PG_READ(c.r.ReadInt64(&m.commit_time), "commit timestamp");
  PG_READ(c.r.ReadUint32(&m.xid), "xid");
  PG_READ(c.r.ReadString(&m.gid), "gid");
  return Status::Ok();
}

Status ParseRollbackPrepared(Ctx& c, Message* out) {
  RollbackPrepared& m = out->emplace<RollbackPrepared>();
  WALRELAY_RETURN_IF_ERROR(ReadZeroFlags(c, &m.flags));
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.prepare_end_lsn, "prepare end lsn", true));
  WALRELAY_RETURN_IF_ERROR(ReadLsn(c, &m.rollback_end_lsn, "rollback end lsn", true));
  PG_READ(c.r.ReadInt64(&m.prepare_time), "prepare timestamp");
  PG_READ(c.r.ReadInt64(&m.rollback_time), "rollback timestamp");
  PG_READ(c.r.ReadUint32(&m.xid), "xid");
  PG_READ(c.r.ReadString(&m.gid), "gid");
  return Status::Ok();
}

#undef PG_READ

// The protocol version that introduced each message type.
int MinVersion(MessageType type) {
  switch (type) {
    case MessageType::kStreamStart:
    case MessageType::kStreamStop:
    case MessageType::kStreamCommit:
    case MessageType::kStreamAbort:
      return kProtoVersionStream;
    case MessageType::kBeginPrepare:
    case MessageType::kPrepare:
    case MessageType::kCommitPrepared:
    case MessageType::kRollbackPrepared:
    case MessageType::kStreamPrepare:
      return kProtoVersionTwoPhase;
    default:
      return kProtoVersionMin;
  }
}

// Indexed by Message::index(); keep in the variant's order.
constexpr std::array<MessageType, std::variant_size_v<Message>> kTypeByIndex = {
    MessageType::kBegin,         MessageType::kCommit,         MessageType::kOrigin,
    MessageType::kRelation,      MessageType::kType,           MessageType::kInsert,
    MessageType::kUpdate,        MessageType::kDelete,         MessageType::kTruncate,
    MessageType::kMessage,       MessageType::kStreamStart,    MessageType::kStreamStop,
    MessageType::kStreamCommit,  MessageType::kStreamAbort,    MessageType::kBeginPrepare,
    MessageType::kPrepare,       MessageType::kCommitPrepared, MessageType::kRollbackPrepared,
    MessageType::kStreamPrepare,
};

}  // namespace

std::string_view MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kBegin:
      return "Begin";
    case MessageType::kCommit:
      return "Commit";
    case MessageType::kOrigin:
      return "Origin";
    case MessageType::kRelation:
      return "Relation";
    case MessageType::kType:
      return "Type";
    case MessageType::kInsert:
      return "Insert";
    case MessageType::kUpdate:
      return "Update";
    case MessageType::kDelete:
      return "Delete";
    case MessageType::kTruncate:
      return "Truncate";
    case MessageType::kMessage:
      return "Message";
    case MessageType::kStreamStart:
      return "Stream Start";
    case MessageType::kStreamStop:
      return "Stream Stop";
    case MessageType::kStreamCommit:
      return "Stream Commit";
    case MessageType::kStreamAbort:
      return "Stream Abort";
    case MessageType::kBeginPrepare:
      return "Begin Prepare";
    case MessageType::kPrepare:
      return "Prepare";
    case MessageType::kCommitPrepared:
      return "Commit Prepared";
    case MessageType::kRollbackPrepared:
      return "Rollback Prepared";
    case MessageType::kStreamPrepare:
      return "Stream Prepare";
  }
  return "unknown";
}

MessageType TypeOf(const Message& message) { return kTypeByIndex[message.index()]; }

void TupleView::FillColumns(std::vector<ColumnValue>* out) const {
  out->resize(num_columns_);
  ColumnValue* w = out->data();
  for (const ColumnValue& v : *this) *w++ = v;
}

bool operator==(const TupleView& a, const TupleView& b) {
  return a.size() == b.size() && a.raw() == b.raw();
}

Status Decode(std::string_view bytes, const DecodeOptions& options, Message* out) {
  const int version = options.protocol_version;
  if (version < kProtoVersionMin || version > kProtoVersionMax) {
    return InvalidArgumentError("pgoutput: unsupported protocol version " +
                                std::to_string(version));
  }
  if (options.in_stream && version < kProtoVersionStream) {
    return InvalidArgumentError("pgoutput: in_stream needs protocol version 2 or later");
  }
  if (options.parallel_streaming && version < kProtoVersionParallelStream) {
    return InvalidArgumentError("pgoutput: parallel streaming needs protocol version 4");
  }
  if (bytes.empty()) return DataLossError("pgoutput: empty message");

  const auto type = static_cast<MessageType>(bytes[0]);
  if (MessageTypeName(type) == "unknown") {
    return DataLossError("pgoutput: unknown message type " +
                         ByteText(static_cast<uint8_t>(bytes[0])) + " at offset 0");
  }
  Ctx c{type, ByteReader(bytes), options};
  if (version < MinVersion(type)) {
    return Malformed(c, 0,
                     "message needs protocol version " + std::to_string(MinVersion(type)) +
                         ", session uses " + std::to_string(version));
  }
  (void)c.r.Skip(1);

  Status st;
  switch (type) {
    case MessageType::kBegin:
      st = ParseBegin(c, out);
      break;
    case MessageType::kCommit:
      st = ParseCommit(c, out);
      break;
    case MessageType::kOrigin:
      st = ParseOrigin(c, out);
      break;
    case MessageType::kRelation:
      st = ParseRelation(c, out);
      break;
    case MessageType::kType:
      st = ParseType(c, out);
      break;
    case MessageType::kInsert:
      st = ParseInsert(c, out);
      break;
    case MessageType::kUpdate:
      st = ParseUpdate(c, out);
      break;
    case MessageType::kDelete:
      st = ParseDelete(c, out);
      break;
    case MessageType::kTruncate:
      st = ParseTruncate(c, out);
      break;
    case MessageType::kMessage:
      st = ParseMessage(c, out);
      break;
    case MessageType::kStreamStart:
      st = ParseStreamStart(c, out);
      break;
    case MessageType::kStreamStop:
      out->emplace<StreamStop>();
      break;
    case MessageType::kStreamCommit:
      st = ParseStreamCommit(c, out);
      break;
    case MessageType::kStreamAbort:
      st = ParseStreamAbort(c, out);
      break;
    case MessageType::kBeginPrepare:
      st = ParseBeginPrepare(c, out);
      break;
    case MessageType::kPrepare:
      st = ParsePrepareLike<Prepare>(c, out);
      break;
    case MessageType::kCommitPrepared:
      st = ParseCommitPrepared(c, out);
      break;
    case MessageType::kRollbackPrepared:
      st = ParseRollbackPrepared(c, out);
      break;
    case MessageType::kStreamPrepare:
      st = ParsePrepareLike<StreamPrepare>(c, out);
      break;
  }
  if (!st.ok()) return st;
  if (!c.r.empty()) {
    return Malformed(c, c.r.offset(),
                     std::to_string(c.r.remaining()) + " trailing bytes after the message");
  }
  return Status::Ok();
}

Result<Message> Decode(std::string_view bytes, const DecodeOptions& options) {
  Message m;
  Status st = Decode(bytes, options, &m);
  if (!st.ok()) return st;
  return m;
}

}  // namespace walrelay::pgoutput
