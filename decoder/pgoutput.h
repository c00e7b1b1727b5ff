// pgoutput: decoder for PostgreSQL's logical replication message format, protocol
// versions 1 to 4 ("Logical Replication Message Formats" in the PostgreSQL docs;
// src/include/replication/logicalproto.h and src/backend/replication/logical/proto.c).
//
// One pgoutput message is the payload of one XLogData ('w') CopyData message. Decode()
// turns it into one of the structs below, held in the `Message` variant.
//
// Stateless (like jackc/pglogrepl): the parser keeps nothing between calls. The caller
// says which protocol version was negotiated and whether the message lies between a
// Stream Start and a Stream Stop (there Relation, Type, Insert, Update, Delete, Truncate
// and Message carry the xid of the streamed (sub)transaction as a prefix). The relation
// map lives in RelationCache and the transaction invariants in TransactionAssembler.
//
// Zero copy / LIFETIME: every std::string_view in a decoded message (names, column
// values, message content, gid) points into the bytes passed to Decode(). A decoded
// message is valid while the input bytes are; copy what must outlive them (RelationCache
// copies Relation messages). Decoding Begin/Commit/Insert/Update/Delete/Stream* never
// allocates; Relation and Truncate allocate their vectors.
//
// Errors: malformed bytes give a kDataLoss Status naming the message type and the byte
// offset from the start of the message (the type byte is offset 0), e.g.
//   "pgoutput Insert: truncated at offset 17: need 4 bytes for column length, have 2".
// Unknown message types, unknown column kinds, negative or oversized lengths, non-zero
// reserved flags, messages the negotiated version does not have, and trailing bytes are
// all errors. Decode never reads outside the input and never crashes on any input.
//
// Thread safety: Decode is a pure function; decoded messages are values.
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/lsn.h"
#include "base/status.h"
#include "decoder/byte_reader.h"

namespace walrelay::pgoutput {

// Protocol versions (the `proto_version` START_REPLICATION option).
inline constexpr int kProtoVersionMin = 1;
inline constexpr int kProtoVersionStream = 2;          // PostgreSQL 14: streaming in-progress txns
inline constexpr int kProtoVersionTwoPhase = 3;        // PostgreSQL 15: two-phase commit
inline constexpr int kProtoVersionParallelStream = 4;  // PostgreSQL 16: parallel streaming
inline constexpr int kProtoVersionMax = 4;

// The first byte of each message.
enum class MessageType : char {
  kBegin = 'B',
  kCommit = 'C',
  kOrigin = 'O',
  kRelation = 'R',
  kType = 'Y',
  kInsert = 'I',
  kUpdate = 'U',
  kDelete = 'D',
  kTruncate = 'T',
  kMessage = 'M',
  kStreamStart = 'S',
  kStreamStop = 'E',
  kStreamCommit = 'c',
  kStreamAbort = 'A',
  kBeginPrepare = 'b',
  kPrepare = 'P',
  kCommitPrepared = 'K',
  kRollbackPrepared = 'r',
  kStreamPrepare = 'p',
};

// "Insert", "Stream Commit", ...; "unknown" for other bytes.
std::string_view MessageTypeName(MessageType type);

// Timestamps on the wire: microseconds since 2000-01-01 00:00:00 UTC (PostgreSQL epoch).
using PgTimestamp = int64_t;
// A PostgreSQL TransactionId.
using Xid = uint32_t;
// A PostgreSQL object id (relation or type).
using Oid = uint32_t;

// ---------------------------------------------------------------------------------------
// TupleData

// TupleData column kinds ("Byte1: identifies the data as ...").
enum class ColumnKind : char {
  kNull = 'n',       // NULL value
  kUnchanged = 'u',  // unchanged TOASTed value: NOT SENT (the actual value is not sent).
                     // Neither NULL nor a default; the consumer must keep the old value.
  kText = 't',       // text formatted value
  kBinary = 'b',     // binary formatted value (only with the `binary` option)
};

// One column of a TupleData. `data` is the value bytes for kText / kBinary, empty
// otherwise. Valid while the decoded input is.
struct ColumnValue {
  ColumnKind kind = ColumnKind::kNull;
  std::string_view data;

  bool is_null() const { return kind == ColumnKind::kNull; }
  // True for an unchanged TOAST column: the value was not sent at all.
  bool is_unchanged_toast() const { return kind == ColumnKind::kUnchanged; }
  bool has_value() const { return kind == ColumnKind::kText || kind == ColumnKind::kBinary; }

  friend bool operator==(const ColumnValue&, const ColumnValue&) = default;
};

// TupleData ("Int16: number of columns; then per column Byte1 kind, and for 't'/'b'
// Int32 length and ByteN value"), validated once by Decode() and read through an
// allocation-free forward iterator. Valid while the decoded input is.
class TupleView {
 public:
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = ColumnValue;
    using difference_type = std::ptrdiff_t;
    using pointer = const ColumnValue*;
    using reference = const ColumnValue&;

    Iterator() = default;
    const ColumnValue& operator*() const { return current_; }
    const ColumnValue* operator->() const { return &current_; }
    Iterator& operator++() {
      ++index_;
      Load();
      return *this;
    }
    Iterator operator++(int) {
      Iterator copy = *this;
      ++*this;
      return copy;
    }
    friend bool operator==(const Iterator& a, const Iterator& b) { return a.index_ == b.index_; }

   private:
    friend class TupleView;
    Iterator(const char* p, uint16_t index, uint16_t count) : p_(p), index_(index), count_(count) {
      Load();
    }
    void Load() {
      if (index_ >= count_) return;
      const char kind = *p_++;
      current_.kind = static_cast<ColumnKind>(kind);
      if (kind == static_cast<char>(ColumnKind::kText) ||
          kind == static_cast<char>(ColumnKind::kBinary)) {
        const uint32_t len = decoder::LoadBigEndian32(p_);
        current_.data = std::string_view(p_ + 4, len);
        p_ += 4 + len;
      } else {
        current_.data = std::string_view();
      }
    }

    const char* p_ = nullptr;  // next unread column
    uint16_t index_ = 0;
    uint16_t count_ = 0;
    ColumnValue current_;
  };

  TupleView() = default;

  // Number of columns in the tuple.
  uint16_t size() const { return num_columns_; }
  bool empty() const { return num_columns_ == 0; }
  Iterator begin() const { return Iterator(columns_.data(), 0, num_columns_); }
  Iterator end() const { return Iterator(nullptr, num_columns_, num_columns_); }

  // Clears *out and appends every column; reuses out's capacity, so a vector kept by the
  // caller across messages makes this allocation-free after the first few rows.
  void FillColumns(std::vector<ColumnValue>* out) const;

  // The encoded column bytes (after the Int16 count).
  std::string_view raw() const { return columns_; }

 private:
  friend struct TupleParser;
  std::string_view columns_;
  uint16_t num_columns_ = 0;
};

bool operator==(const TupleView& a, const TupleView& b);

// ---------------------------------------------------------------------------------------
// Messages. Field order follows the wire format.

// Begin 'B': start of a transaction. "Int64 The final LSN of the transaction. Int64 Commit
// timestamp of the transaction. Int32 Xid of the transaction."
struct Begin {
  Lsn final_lsn;
  PgTimestamp commit_time = 0;
  Xid xid = 0;
  friend bool operator==(const Begin&, const Begin&) = default;
};

// Commit 'C': "Int8(0) Flags; currently unused. Int64 The LSN of the commit. Int64 The end
// LSN of the transaction. Int64 Commit timestamp of the transaction."
// Confirm end_lsn (not commit_lsn) so that a restart does not resend the transaction.
struct Commit {
  uint8_t flags = 0;
  Lsn commit_lsn;
  Lsn end_lsn;
  PgTimestamp commit_time = 0;
  friend bool operator==(const Commit&, const Commit&) = default;
};

// Origin 'O': "Int64 The LSN of the commit on the origin server. String Name of the
// origin." Sent right after Begin (or Begin Prepare / Stream Start) when the transaction
// was replicated from elsewhere.
struct Origin {
  Lsn origin_lsn;
  std::string_view name;
  friend bool operator==(const Origin&, const Origin&) = default;
};

// Relation replica identity setting (pg_class.relreplident).
enum class ReplicaIdentity : char {
  kDefault = 'd',  // primary key
  kNothing = 'n',
  kFull = 'f',   // all columns
  kIndex = 'i',  // a chosen unique index
};

// One column of a Relation message.
struct RelationColumn {
  // "Int8 Flags for the column. Currently can be either 0 for no flags or 1 which marks the
  // column as part of the key."
  static constexpr uint8_t kFlagKey = 1;
  uint8_t flags = 0;
  std::string_view name;
  Oid type_oid = 0;
  int32_t type_modifier = -1;  // atttypmod

  bool is_key() const { return (flags & kFlagKey) != 0; }
  friend bool operator==(const RelationColumn&, const RelationColumn&) = default;
};

// Relation 'R': describes a table before the first change to it in a session and again
// after its definition changed. "Int32 (TransactionId) Xid (only present for streamed
// transactions). Int32 (Oid) OID of the relation. String Namespace (empty string for
// pg_catalog). String Relation name. Int8 Replica identity setting. Int16 Number of
// columns. Next, for each column: Int8 flags, String name, Int32 type OID, Int32 typmod."
// `namespace_name` is "pg_catalog" when the wire carries the empty string.
struct Relation {
  std::optional<Xid> xid;
  Oid relation_id = 0;
  std::string_view namespace_name;
  std::string_view relation_name;
  ReplicaIdentity replica_identity = ReplicaIdentity::kDefault;
  std::vector<RelationColumn> columns;
  friend bool operator==(const Relation&, const Relation&) = default;
};

// Type 'Y': describes a non-built-in type used by a following Relation. "Int32 Xid (only
// present for streamed transactions). Int32 (Oid) OID of the data type. String Namespace
// (empty string for pg_catalog). String Name of the data type."
struct Type {
  std::optional<Xid> xid;
  Oid type_oid = 0;
  std::string_view namespace_name;  // "pg_catalog" for the empty string
  std::string_view type_name;
  friend bool operator==(const Type&, const Type&) = default;
};

// Insert 'I': "Int32 Xid (only present for streamed transactions). Int32 (Oid) OID of the
// relation corresponding to the ID in the relation message. Byte1('N') Identifies the
// following TupleData message as a new tuple. TupleData."
struct Insert {
  std::optional<Xid> xid;
  Oid relation_id = 0;
  TupleView new_tuple;
  friend bool operator==(const Insert&, const Insert&) = default;
};

// Which old tuple an Update/Delete carries.
enum class OldTupleKind : char {
  kNone = 0,    // Update only: no old tuple (key unchanged, replica identity DEFAULT/INDEX)
  kKey = 'K',   // the old replica identity key columns (other columns 'n')
  kFull = 'O',  // the whole old row (REPLICA IDENTITY FULL)
};

// Update 'U': "Int32 Xid (only present for streamed transactions). Int32 (Oid) relation
// OID. Byte1('K') key TupleData or Byte1('O') old TupleData, optional. Byte1('N') new
// TupleData." Columns of the new tuple may be 'u' (unchanged TOAST, not sent).
struct Update {
  std::optional<Xid> xid;
  Oid relation_id = 0;
  OldTupleKind old_kind = OldTupleKind::kNone;
  TupleView old_tuple;  // empty when old_kind == kNone
  TupleView new_tuple;
  friend bool operator==(const Update&, const Update&) = default;
};

// Delete 'D': "Int32 Xid (only present for streamed transactions). Int32 (Oid) relation
// OID. Byte1('K') key TupleData or Byte1('O') old TupleData."
struct Delete {
  std::optional<Xid> xid;
  Oid relation_id = 0;
  OldTupleKind old_kind = OldTupleKind::kKey;  // kKey or kFull
  TupleView old_tuple;
  friend bool operator==(const Delete&, const Delete&) = default;
};

// Truncate 'T': "Int32 Xid (only present for streamed transactions). Int32 Number of
// relations. Int8 Option bits for TRUNCATE: 1 for CASCADE, 2 for RESTART IDENTITY.
// Int32 (Oid) relation OID, repeated."
struct Truncate {
  static constexpr uint8_t kOptionCascade = 1;
  static constexpr uint8_t kOptionRestartIdentity = 2;
  std::optional<Xid> xid;
  uint8_t options = 0;
  std::vector<Oid> relation_ids;

  bool cascade() const { return (options & kOptionCascade) != 0; }
  bool restart_identity() const { return (options & kOptionRestartIdentity) != 0; }
  friend bool operator==(const Truncate&, const Truncate&) = default;
};

// Message 'M' (pg_logical_emit_message): "Int32 Xid (only present for streamed
// transactions). Int8 Flags; either 0 for no flags or 1 if the logical decoding message is
// transactional. Int64 The LSN of the logical decoding message. String The prefix.
// Int32 Length of the content. ByteN The content."
// A non-transactional message is sent as soon as it is decoded, outside any transaction.
struct LogicalMessage {
  static constexpr uint8_t kFlagTransactional = 1;
  std::optional<Xid> xid;
  uint8_t flags = 0;
  Lsn lsn;
  std::string_view prefix;
  std::string_view content;

  bool transactional() const { return (flags & kFlagTransactional) != 0; }
  friend bool operator==(const LogicalMessage&, const LogicalMessage&) = default;
};

// Stream Start 'S' (v2+): "Int32 Xid of the transaction. Int8 A value of 1 indicates this
// is the first stream segment for this XID, 0 for any other stream segment."
struct StreamStart {
  Xid xid = 0;
  bool first_segment = false;
  friend bool operator==(const StreamStart&, const StreamStart&) = default;
};

// Stream Stop 'E' (v2+): no fields; ends the current stream segment.
struct StreamStop {
  friend bool operator==(const StreamStop&, const StreamStop&) = default;
};

// Stream Commit 'c' (v2+): "Int32 Xid of the transaction. Int8(0) Flags; currently unused.
// Int64 The LSN of the commit. Int64 The end LSN of the transaction. Int64 Commit
// timestamp of the transaction."
struct StreamCommit {
  Xid xid = 0;
  uint8_t flags = 0;
  Lsn commit_lsn;
  Lsn end_lsn;
  PgTimestamp commit_time = 0;
  friend bool operator==(const StreamCommit&, const StreamCommit&) = default;
};

// Stream Abort 'A' (v2+): "Int32 Xid of the transaction. Int32 Xid of the subtransaction
// (will be same as xid of the transaction for top-level transactions). Int64 The LSN of
// the abort operation, present only when streaming is set to parallel (v4). Int64 Abort
// timestamp of the transaction, present only when streaming is set to parallel (v4)."
struct StreamAbort {
  Xid xid = 0;
  Xid subxact_xid = 0;
  std::optional<Lsn> abort_lsn;           // only with parallel streaming
  std::optional<PgTimestamp> abort_time;  // only with parallel streaming

  bool aborts_top_level() const { return xid == subxact_xid; }
  friend bool operator==(const StreamAbort&, const StreamAbort&) = default;
};

// Begin Prepare 'b' (v3+): "Int64 The LSN of the prepare. Int64 The end LSN of the
// prepared transaction. Int64 Prepare timestamp of the transaction. Int32 Xid of the
// transaction. String The user defined GID of the two-phase transaction."
struct BeginPrepare {
  Lsn prepare_lsn;
  Lsn end_lsn;
  PgTimestamp prepare_time = 0;
  Xid xid = 0;
  std::string_view gid;
  friend bool operator==(const BeginPrepare&, const BeginPrepare&) = default;
};

// Prepare 'P' (v3+): "Int8(0) Flags; currently unused. Int64 The LSN of the prepare.
// Int64 The end LSN of the prepared transaction. Int64 Prepare timestamp of the
// transaction. Int32 Xid of the transaction. String The user defined GID."
struct Prepare {
  uint8_t flags = 0;
  Lsn prepare_lsn;
  Lsn end_lsn;
  PgTimestamp prepare_time = 0;
  Xid xid = 0;
  std::string_view gid;
  friend bool operator==(const Prepare&, const Prepare&) = default;
};

// Commit Prepared 'K' (v3+): "Int8(0) Flags; currently unused. Int64 The LSN of the commit
// of the prepared transaction. Int64 The end LSN of the commit of the prepared
// transaction. Int64 Commit timestamp of the transaction. Int32 Xid of the transaction.
// String The user defined GID of the two-phase transaction."
struct CommitPrepared {
  uint8_t flags = 0;
  Lsn commit_lsn;
  Lsn end_lsn;
  PgTimestamp commit_time = 0;
  Xid xid = 0;
  std::string_view gid;
  friend bool operator==(const CommitPrepared&, const CommitPrepared&) = default;
};

// Rollback Prepared 'r' (v3+): "Int8(0) Flags; currently unused. Int64 The end LSN of the
// prepared transaction. Int64 The end LSN of the rollback of the prepared transaction.
// Int64 Prepare timestamp of the transaction. Int64 Rollback timestamp of the
// transaction. Int32 Xid of the transaction. String The user defined GID."
struct RollbackPrepared {
  uint8_t flags = 0;
  Lsn prepare_end_lsn;
  Lsn rollback_end_lsn;
  PgTimestamp prepare_time = 0;
  PgTimestamp rollback_time = 0;
  Xid xid = 0;
  std::string_view gid;
  friend bool operator==(const RollbackPrepared&, const RollbackPrepared&) = default;
};

// Stream Prepare 'p' (v3+): same fields as Prepare, for a streamed transaction.
struct StreamPrepare {
  uint8_t flags = 0;
  Lsn prepare_lsn;
  Lsn end_lsn;
  PgTimestamp prepare_time = 0;
  Xid xid = 0;
  std::string_view gid;
  friend bool operator==(const StreamPrepare&, const StreamPrepare&) = default;
};

using Message =
    std::variant<Begin, Commit, Origin, Relation, Type, Insert, Update, Delete, Truncate,
                 LogicalMessage, StreamStart, StreamStop, StreamCommit, StreamAbort, BeginPrepare,
                 Prepare, CommitPrepared, RollbackPrepared, StreamPrepare>;

// The type byte of a decoded message.
MessageType TypeOf(const Message& message);

// What the caller knows about the session and the position in it.
struct DecodeOptions {
  // The negotiated proto_version, kProtoVersionMin..kProtoVersionMax.
  int protocol_version = kProtoVersionMin;
  // True between Stream Start and Stream Stop (TransactionAssembler::in_stream()).
  // REQUIRES: protocol_version >= 2 when true.
  bool in_stream = false;
  // True when START_REPLICATION asked for streaming 'parallel' (v4): Stream Abort then
  // carries abort_lsn and abort_time. REQUIRES: protocol_version >= 4 when true.
  bool parallel_streaming = false;
};

// Decodes exactly one pgoutput message (type byte included) into *out.
// kInvalidArgument for options that break their REQUIRES; kDataLoss for bad bytes. On
// error *out is unspecified. The result borrows from `bytes` (see LIFETIME above).
Status Decode(std::string_view bytes, const DecodeOptions& options, Message* out);
Result<Message> Decode(std::string_view bytes, const DecodeOptions& options);

}  // namespace walrelay::pgoutput
