// OutboxMapper: turns an outbox row (pgoutput Insert) or a table-less outbox message
// (transactional pg_logical_emit_message with the configured prefix) into a Kafka record.
//
//   topic   = the row's topic column when present and non-NULL, else the topic template
//             with ${aggregate_type}, ${event_type}, ${table} substituted
//   key     = aggregate_id (never NULL: a NULL or absent aggregate_id is unmappable), as
//             its text or (key_format json-string) a JSON string literal of it
//   value   = payload exactly as PostgreSQL sent it (jsonb/json/text: its text form; with
//             value_format json-string, a JSON string literal of that text); a bytea
//             payload (Avro, Protobuf) as its bytes
//   headers = event_id, event_type, aggregate_type (when set), every string entry of the
//             headers column (a JSON object), and the source position added by the relay.
//             The names walrelay writes (event_id, event_type, aggregate_type, walrelay.*,
//             in any ASCII case) are reserved: a headers column or envelope that carries
//             one is unmappable ("header event_id is reserved ..."), so no record ever
//             carries two of them.
//
// A row that cannot be mapped gives a kInvalidArgument Status whose message is the
// dead-letter reason ("column aggregate_id is NULL", "table public.outbox has no column
// payload", "envelope is not a JSON object: ..."). Nothing is ever skipped silently.
//
// Relation handling: OnRelation() is called for every Relation message (they are re-sent
// after ALTER TABLE and on reconnect) and recomputes the column positions of that
// relation; rows of relations that are not configured outbox tables are not events.
// Which relations are outbox tables is decided by identity, never by comparing configured
// text (architecture invariant 8): by OID when the session resolved the configured names
// with the server (pgoutput's Relation carries the OID; a partitioned outbox arrives under
// its root's OID because the publication publishes via the root), by the exact catalog
// names otherwise (wal2json, whose relation ids are synthetic, and replays of recordings,
// which have no server to ask: names parsed with SQL's rules, base/sql.h).
//
// LIFETIME: the string_views of an OutboxEvent point into the decoded row or message and
// into the mapper's own buffers; valid until the next Map*() call or while the input is.
// The mapper keeps a reference to the configuration, which must outlive it; the topic
// template is parsed when the mapper is made (a later change to it is not seen).
// Thread safety: not thread-safe; one mapper per relay thread.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "decoder/pgoutput.h"
#include "src/relay/core/config.h"

namespace walrelay::relay {

// One outbox row's fields as text; nullopt = NULL (or no such column).
struct OutboxRow {
  std::optional<std::string_view> event_id, aggregate_type, aggregate_id, topic, event_type,
      payload, headers;
  // The payload column is bytea (Avro, Protobuf): `payload` is its text form (\x hex) and
  // the record's value is the bytes.
  bool payload_is_bytea = false;
};

struct OutboxEvent {
  std::string_view topic;
  std::string_view key;    // aggregate_id
  std::string_view value;  // payload
  std::string_view event_id;
  std::string_view event_type;
  std::string_view aggregate_type;  // empty when absent
  bool value_is_bytes = false;      // the payload column is bytea: `value` is not text
  // Extra headers from the headers column / envelope: name/value pairs (views into the
  // mapper's buffer).
  std::vector<std::pair<std::string_view, std::string_view>> extra_headers;
};

// An outbox table as the stream names it.
struct OutboxTable {
  pgoutput::Oid oid = 0;     // pg_class.oid; 0 when unknown (no server at hand)
  std::string schema, name;  // catalog names (exact case)
};

// The configured tables parsed with SQL's name rules, without OIDs (for sources that have
// no server to resolve them: recordings). Unparsable names are left out (the
// configuration is validated before).
std::vector<OutboxTable> OutboxTablesByName(const std::vector<std::string>& configured);

class OutboxMapper {
 public:
  // `tables`: the outbox tables; `match_by_oid`: relations are outbox tables when their OID
  // is one of `tables`' (else when their schema and name are).
  OutboxMapper(const RelayConfig& config, std::vector<OutboxTable> tables, bool match_by_oid);
  // The configured tables matched by name (OutboxTablesByName).
  explicit OutboxMapper(const RelayConfig& config)
      : OutboxMapper(config, OutboxTablesByName(config.tables), /*match_by_oid=*/false) {}

  // Records the column positions of `relation` (replacing any earlier entry for its OID).
  void OnRelation(const pgoutput::Relation& relation);

  // True when `relation_id` is a configured outbox table (as of its last Relation).
  bool IsOutbox(pgoutput::Oid relation_id) const;
  // "schema.table" of a known relation, or "" when unknown.
  std::string_view TableName(pgoutput::Oid relation_id) const;

  // Maps an Insert into an outbox table. REQUIRES: IsOutbox(insert.relation_id).
  // kInvalidArgument (the dead-letter reason) when the row cannot be mapped.
  Status MapInsert(const pgoutput::Insert& insert, OutboxEvent* out);

  // The whole row as a JSON object of column texts: what a dead letter keeps when the
  // row could not be mapped (so nothing of it is lost).
  std::string RowAsJson(const pgoutput::Insert& insert) const;

  // Maps a row read by SQL (lost-slot recovery) the same way as a streamed Insert.
  Status MapRow(std::string_view table, const OutboxRow& row, OutboxEvent* out);

  // True when `message` is a table-less outbox event (configured prefix).
  bool IsOutboxMessage(const pgoutput::LogicalMessage& message) const;
  // Maps the JSON envelope {"event_id", "aggregate_type", "aggregate_id", "topic",
  // "event_type", "payload", "headers"} of a table-less event. Non-transactional
  // messages are unmappable (they are not atomic with the business write).
  Status MapMessage(const pgoutput::LogicalMessage& message, OutboxEvent* out);

 private:
  struct Mapping {
    std::string table;  // schema.table
    bool is_outbox = false;
    std::string missing;  // reason when a required column is absent, else empty
    std::vector<std::string> column_names;
    int event_id = -1, aggregate_type = -1, aggregate_id = -1, topic = -1, event_type = -1,
        payload = -1, headers = -1;
    bool payload_is_bytea = false;
  };

  // The topic template, parsed once: literal text and the placeholders ${aggregate_type},
  // ${event_type} and ${table} (an unknown ${name} is literal text).
  enum class TemplateField { kLiteral, kAggregateType, kEventType, kTable };
  struct TemplatePart {
    TemplateField field;
    std::string text;  // the literal, or the placeholder's name
  };
  static std::vector<TemplatePart> CompileTopicTemplate(std::string_view tmpl);
  // The template for `event` of `table` into topic_buffer_. Returns the name of a
  // placeholder whose value is empty (the topic would be wrong), or "" when all were set.
  std::string_view ExpandTopicTemplate(std::string_view table, const OutboxEvent& event);

  void Reset(OutboxEvent* out);
  // Topic, its checks, the key check, and the key and value formats (config's
  // key_format / value_format; `value_is_text` false for a bytea payload's bytes).
  Status FinishEvent(std::string_view table, std::string_view topic_column, bool value_is_text,
                     OutboxEvent* out);
  Status AddHeaders(simdjson::dom::element headers, OutboxEvent* out);

  const RelayConfig& config_;
  const std::vector<OutboxTable> tables_;
  const bool match_by_oid_;
  std::unordered_map<pgoutput::Oid, Mapping> relations_;
  std::vector<pgoutput::ColumnValue> columns_;  // reused per row
  const std::vector<TemplatePart> topic_template_;
  std::string topic_buffer_;
  std::string checked_topic_;  // the last topic name that passed the topic checks
  std::deque<std::string> owned_;  // stable storage for converted header values / payloads
  simdjson::dom::parser json_;     // views into its buffers live until the next parse
};

}  // namespace walrelay::relay
