// wal2json: decoder for the JSON output of the wal2json logical decoding plugin with
// `format-version` 2 (one JSON object per action), producing the SAME change model as the
// pgoutput decoder: pgoutput::Message values (Begin, Commit, Relation, Insert, Update,
// Delete, Truncate, LogicalMessage). A relay that feeds pgoutput messages through
// TransactionAssembler / RelationCache / its mapper consumes wal2json by swapping the
// call to pgoutput::Decode for Wal2JsonDecoder::Decode and looping over the (one or two)
// messages it returns.
//
// Required slot options: 'format-version' '2', 'include-xids' '1', 'include-timestamp'
// '1', 'include-lsn' '1' (B/C carry the commit LSN and the end LSN as "lsn"/"nextlsn";
// without them no Commit can be built), 'include-transaction' '1' (the default);
// recommended: 'include-type-oids' '1' (else type OIDs are 0) and 'include-pk' '1' (else
// no column is flagged as key). See kRequiredOptions.
//
// How actions map (wal2json -> pgoutput):
//   B -> Begin{final_lsn = lsn, commit_time = timestamp, xid}
//   C -> Commit{commit_lsn = lsn, end_lsn = nextlsn, commit_time = timestamp}
//   I -> [Relation] Insert;  U -> [Relation] Update;  D -> [Relation] Delete
//   T -> [Relation] Truncate (one relation per T; wal2json sends no CASCADE/RESTART bits)
//   M -> LogicalMessage{flags = transactional, lsn, prefix, content}
// Relations: wal2json names tables, pgoutput numbers them. The decoder gives each
// schema.table a SYNTHETIC OID, stable for the table within the decoder's life (a 32-bit
// FNV-1a hash of "schema.table" with the top bit set, probed on collision), and returns a
// Relation message (replica identity 'd', typmod -1, key flags from "pk") before the first
// change to the table and whenever its column list (names, type OIDs/names, key flags)
// changes, e.g. after ALTER TABLE: the same OID, a new Relation, exactly as pgoutput does.
//
// Column values (wal2json JSON -> the TEXT pgoutput would send, ColumnKind::kText):
//   null            -> kNull
//   "string"        -> its unescaped text (json/jsonb documents arrive as a JSON string of
//                      the document's text form, so they come out as PostgreSQL prints them)
//   bytea "00ff"    -> "\x00ff" (wal2json drops the \x of bytea's hex output; restored so
//                      the value is byteain-compatible, like pgoutput's)
//   number          -> its exact JSON token ("1.50" stays "1.50", "1e+300" stays as is)
//   true / false    -> "t" / "f": boolout's text, which is what pgoutput sends. Consumers
//                      written for pgoutput then see identical values.
//   column absent from an Update's "columns" but known for the table -> kUnchanged: wal2json
//                      omits unchanged TOASTed columns, pgoutput sends 'u'.
// Old tuples: "identity" becomes the old tuple, kFull when it names every column of the
// table (REPLICA IDENTITY FULL), else kKey with the other columns 'n'. Unlike pgoutput,
// wal2json sends "identity" on every Update, also when the key did not change, so Updates
// from wal2json carry kKey where pgoutput would send no old tuple.
//
// Known losses in wal2json itself (not recoverable here): NaN/Infinity numeric and float
// values arrive as null; a logical message's content is printed as text, so binary content
// is cut at the first NUL byte; empty transactions (DDL only) arrive as B/C pairs, which
// pgoutput on PostgreSQL 15 does not send. A column dropped by ALTER TABLE looks like an
// unchanged TOAST column in an Update until the next Insert re-describes the table.
//
// Padding: simdjson needs SIMDJSON_PADDING readable bytes after the document. Decode()
// copies the input once into a buffer the decoder owns (grown, never shrunk) and parses it
// through simdjson::padded_string_view with the On Demand API: one memcpy per document,
// no allocation in steady state, and the caller's buffer needs no padding. Strings without
// a backslash (keys, names, types, most values) are viewed in that copy; only escaped ones
// are unescaped, into a second decoder-owned buffer.
//
// Errors: malformed JSON, a wrong type for a known field, an unknown action, or a missing
// required field -> kDataLoss "wal2json: ... at offset N" (N = byte offset in the
// document); B/C without lsn/nextlsn -> kFailedPrecondition (start the slot with
// include-lsn). Unknown fields are ignored (On Demand skips them without validating).
//
// LIFETIME: every string_view in the returned messages (names, column values, message
// content) points into storage owned by the decoder: valid until the next Decode() or
// Reset() call or the decoder's destruction. The input may be freed right after Decode().
// Thread safety: none; one decoder per replication stream.
#pragma once

#include <simdjson.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/status.h"
#include "decoder/pgoutput.h"

namespace walrelay::wal2json {

// Slot options (name, value) the decoder needs, for pg_logical_slot_*_changes or
// START_REPLICATION ... LOGICAL (options).
inline constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kRequiredOptions = {{
    {"format-version", "2"},
    {"include-xids", "1"},
    {"include-timestamp", "1"},
    {"include-lsn", "1"},
    {"include-transaction", "1"},
    {"include-type-oids", "1"},
    {"include-pk", "1"},
}};

class Wal2JsonDecoder {
 public:
  Wal2JsonDecoder();
  ~Wal2JsonDecoder();
  Wal2JsonDecoder(const Wal2JsonDecoder&) = delete;
  Wal2JsonDecoder& operator=(const Wal2JsonDecoder&) = delete;

  // Decodes one wal2json format-version 2 document (one action). Clears *out, then appends
  // the messages it stands for in the order they must be processed: a synthesized Relation
  // first when the table is new or its description changed, then the action's message.
  // On error *out is empty and the decoder's table descriptions are unchanged.
  // Views in *out follow the LIFETIME contract above.
  Status Decode(std::string_view json, std::vector<pgoutput::Message>* out);

  // Forgets every table description (on reconnect): the next change to each table is
  // preceded by a Relation again. Synthetic OIDs stay the same.
  void Reset();

  // The synthetic OID for schema.table (assigning one if needed).
  pgoutput::Oid OidFor(std::string_view schema, std::string_view table);

 private:
  struct ColumnDesc {
    std::string name;
    std::string type;
    pgoutput::Oid type_oid = 0;
    bool key = false;
    friend bool operator==(const ColumnDesc&, const ColumnDesc&) = default;
  };
  struct TableState {
    std::vector<ColumnDesc> columns;
    bool described = false;  // a Relation was returned since the last Reset()
  };
  struct Parsed;

  Status Parse(std::string_view json, Parsed* p);
  Status Build(const Parsed& p, std::vector<pgoutput::Message>* out);

  simdjson::ondemand::parser parser_;
  std::string padded_;               // input copy + SIMDJSON_PADDING
  std::string unescaped_;            // strings with escapes, unescaped (see StringReader)
  std::array<std::string, 2> wire_;  // pgoutput wire bytes the returned messages view
  std::unordered_map<std::string, TableState> tables_;  // key: schema + '\0' + table
  std::unordered_map<std::string, pgoutput::Oid> oids_;
  std::unordered_set<pgoutput::Oid> used_oids_;
  std::unique_ptr<Parsed> parsed_;  // reused: its vectors keep their capacity
  std::vector<size_t> positions_;   // Build's scratch: columns' places in a description
};

// "2026-12-02 13:36:11.467492+00" (timestamptz_to_str output, offset [+-]HH[:MM[:SS]]) to
// microseconds since 2000-01-01 00:00:00 UTC. kDataLoss on anything else.
Result<pgoutput::PgTimestamp> ParseTimestamp(std::string_view text);

}  // namespace walrelay::wal2json
