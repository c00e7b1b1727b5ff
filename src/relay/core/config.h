// RelayConfig: everything `walrelay run` is told, after flags, WALRELAY_* environment
// variables and the TOML file have been merged (src/cli/options.h does the merging and
// documents every option). Plain data; Validate() checks cross-field rules.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/headers.h"
#include "base/status.h"
#include "slot/conninfo.h"

namespace walrelay::relay {

// Kafka's rule for topic names: letters, digits, '.', '_' and '-', 1 to 249 of them, not
// "." or "..". One definition for the mapper (per event), the topic template and
// outbox.allowed_topics.
constexpr bool IsTopicNameChar(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '.' || ch == '_' || ch == '-';
}
constexpr bool IsValidTopicName(std::string_view t) {
  if (t.empty() || t.size() > 249 || t == "." || t == "..") return false;
  for (char ch : t) {
    if (!IsTopicNameChar(ch)) return false;
  }
  return true;
}

// Prefix of the relay's heartbeat messages (non-transactional, never published).
inline constexpr std::string_view kHeartbeatPrefix = "walrelay.heartbeat";
inline constexpr std::string_view kDefaultMessagePrefix = "walrelay.outbox";

// Column names of an outbox table. Defaults match the documented schema:
//   outbox(id bigint identity PK, event_id uuid NOT NULL DEFAULT gen_random_uuid(),
//          aggregate_type text, aggregate_id text NOT NULL, topic text,
//          event_type text NOT NULL, payload jsonb NOT NULL, headers jsonb,
//          created_at timestamptz NOT NULL DEFAULT now())
// An empty name means "this table has no such column" (only for optional columns:
// aggregate_type, topic, headers, created_at).
struct OutboxColumns {
  std::string id = "id";
  std::string event_id = "event_id";
  std::string aggregate_type = "aggregate_type";
  std::string aggregate_id = "aggregate_id";
  std::string topic = "topic";
  std::string event_type = "event_type";
  std::string payload = "payload";
  std::string headers = "headers";
  std::string created_at = "created_at";
};

// Names of the Kafka headers walrelay writes on every record (defaults and order in
// base/headers.h and docs/inbox-contract.md). event_id and position are always written
// (consumers dedup on the first; the relay reads the second back from a refused record);
// an empty event_type or aggregate_type name means that header is not written.
struct HeaderNames {
  std::string event_id{headers::kEventId};
  std::string event_type{headers::kEventType};
  std::string aggregate_type{headers::kAggregateType};
  std::string position{headers::kPosition};
};

// When the Kafka record's timestamp is taken.
enum class RecordTimestamp {
  kProduce,  // when walrelay produces it (librdkafka's default, CreateTime = now)
  kCommit,   // the source transaction's commit time (what Debezium sets; recovered rows,
             // whose commit time is unknown, get the produce time)
};

// What a record looks like (docs/inbox-contract.md section 1).
enum class RecordFormat {
  kWalrelay,  // the value is the payload; the contract's headers
  // CloudEvents 1.0, Kafka protocol binding (cloudevents/spec kafka-protocol-binding.md),
  // binary content mode: the value is the payload; ce_specversion, ce_id (event id),
  // ce_source, ce_type (event type), ce_time (commit time, when known) and content-type
  // headers besides the contract's.
  kCloudEventsBinary,
  // Structured content mode: the value is one CloudEvents JSON document (the attributes
  // above, the payload as `data`, or `data_base64` for a bytea payload), content-type
  // application/cloudevents+json; the contract's headers as well.
  kCloudEventsStructured,
};

// How a record's key or value carries its column's text.
enum class TextFormat {
  kRaw,         // the text's bytes as they are (StringConverter)
  kJsonString,  // a JSON string literal of the text: "..." with escapes (Kafka Connect's
                // JsonConverter with schemas.enable=false, Debezium's usual default)
  // Kafka Connect's JsonConverter with schemas.enable=true (Kafka's default converter):
  // {"schema":<the column's Connect schema>,"payload":<the JSON string literal>}, byte for
  // byte as Debezium's PostgreSQL connector writes it for a NOT NULL text key column
  // ({"type":"string","optional":false}) and a jsonb payload column
  // ({"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}).
  kConnectJson,
  // The JSON text without the whitespace between its tokens (values only): what Debezium's
  // router writes with table.expand.json.payload=true and schemaless JSON values (it
  // parses the payload and serializes it compactly; members in the same order).
  kCompactJson,
};

// How outbox rows go away once delivered (docs/operations.md section 4; issue 14).
enum class OutboxCleanup {
  // The janitor (lifecycle/janitor.h) deletes delivered rows older than outbox_retention in small
  // batches; with outbox_retention 0 no one does (the application's own job).
  kJanitor,
  // The outbox is range-partitioned on created_at (`walrelay setup` makes it so); the
  // janitor creates partitions ahead and drops whole partitions older than the retention
  // once every row in them is delivered (lifecycle/partitions.h). No dead tuples.
  kPartitions,
  // Writers delete each row in the transaction that inserted it
  // (outbox::OutboxTarget::delete_in_same_transaction): the WAL carries the INSERT, the
  // table stays empty. Lost-slot recovery then has no rows to republish: needs
  // recovery_enabled = false, said at start.
  kSameTransaction,
};
enum class PartitionPeriod { kDaily, kHourly };

// Where `walrelay run` reads outbox events from.
enum class SourceMode {
  kWal,   // the logical slot (default): commit order, no writes to the outbox
  kPoll,  // polling the outbox tables for rows not yet published (polling/poller.h): no slot
};

// --source-mode poll: this replica's share of the aggregates (polling/poller.h).
struct PollShard {
  int index = 0;
  int count = 1;  // 1 = every aggregate
};
// "I/N" with 0 <= I < N <= 1024, or "" for all; kInvalidArgument otherwise.
Result<PollShard> ParsePollShard(std::string_view text);

struct RelayConfig;
// Sets the defaults of an outbox profile on `config` (before any other option applies):
// "walrelay" changes nothing; "debezium" gives what Debezium's PostgreSQL connector with
// the Outbox Event Router writes by default (docs/migrating-from-debezium.md): columns
// id, aggregatetype, aggregateid, type, payload (no id ordering column, no topic or
// headers column), topic outbox.event.${aggregate_type}, the event id in header `id` and
// no event_type / aggregate_type headers, the commit time as the record timestamp, slot
// `debezium` and publication `dbz_publication`. kInvalidArgument for another name.
Status ApplyOutboxProfile(std::string_view profile, RelayConfig* config);

// outbox.topic_template, checked where it is configured (RelayConfig::Validate): every
// ${...} is a known placeholder (${aggregate_type}, ${event_type}, ${table}; a misspelled
// one gets "did you mean"), and its literal text has only characters Kafka allows in a
// topic name, at most 249 of them. kInvalidArgument naming the fault; an empty template
// is OK (the topic column decides).
Status CheckTopicTemplate(std::string_view tmpl);

struct RelayConfig {
  // --- source (PostgreSQL)
  std::string source_dsn;  // libpq conninfo or URI; empty = libpq environment (PGHOST...)
  std::string source_password;    // from a file or PGPASSWORD; never logged
  std::string slot = "walrelay";  // logical slot name
  std::string publication = "walrelay_outbox";
  bool create_slot = true;  // create publication + slot when missing
  // PostgreSQL 17+: create the slot with failover enabled, so that a standby with
  // sync_replication_slots keeps a copy and a promoted standby has it (docs/operations.md,
  // failover). Ignored on older servers, which have no failover slots.
  bool slot_failover = true;
  // Output plugin of the slot: "pgoutput" (default) or "wal2json" (format-version 2).
  std::string plugin = "pgoutput";
  std::vector<std::string> tables = {"public.outbox"};  // schema-qualified outbox tables
  OutboxColumns columns;
  // Table-less outbox: transactional pg_logical_emit_message(true, prefix, envelope).
  // Off unless set (empty): emitting a message needs no privilege in PostgreSQL, so any
  // role that can log in could publish through walrelay. kDefaultMessagePrefix is the one
  // outbox::AppendMessage uses; while off, messages with it are dead-lettered with the
  // reason instead of published (never dropped silently).
  std::string message_prefix;

  // --- source mode (polling/poller.h for the polling publisher)
  SourceMode source_mode = SourceMode::kWal;
  int64_t poll_batch_rows = 100;                   // rows per polling transaction
  std::chrono::milliseconds poll_interval{500};    // pause after a poll that found nothing
  int64_t poll_max_attempts = 5;                   // failed produces before a dead letter
  // This replica's share of the aggregates: "I/N" (0 <= I < N), empty = all.
  std::string poll_shard;
  // Publish a row only once every transaction older than its own has ended (polling/poller.h,
  // per-aggregate order); off trades that for lower latency under long transactions.
  bool poll_wait_for_older_transactions = true;

  // --- mapping
  // Topic: the row's topic column when present and non-null, else this template;
  // ${aggregate_type}, ${event_type}, ${table} are substituted.
  std::string topic_template = "outbox.${aggregate_type}";
  // The topics walrelay may publish to: exact names, or prefixes written with a trailing
  // '*' ("payments.*"). Empty: any topic. A row or table-less event whose topic is not
  // allowed is dead-lettered with the reason (any role that can write the outbox, or call
  // pg_logical_emit_message, chooses its topic).
  std::vector<std::string> allowed_topics;

  // The outbox profile whose defaults were applied (ApplyOutboxProfile).
  std::string profile = "walrelay";
  // The Kafka headers' names (HeaderNames), the record timestamp, and how the key
  // (aggregate id) and a text value (payload) are written; a bytea payload is always its
  // bytes.
  HeaderNames header_names;
  RecordTimestamp record_timestamp = RecordTimestamp::kProduce;
  TextFormat key_format = TextFormat::kRaw;
  TextFormat value_format = TextFormat::kRaw;
  // The record format, and the CloudEvents `source` attribute (a URI-reference naming
  // where events come from; empty: "/walrelay/" + slot).
  RecordFormat record_format = RecordFormat::kWalrelay;
  std::string cloudevents_source;

  // The outbox janitor (lifecycle/janitor.h): deletes rows older than this that are delivered; 0 =
  // off (the outbox is cleaned by others). Needs columns.created_at.
  std::chrono::milliseconds outbox_retention{0};
  OutboxCleanup outbox_cleanup = OutboxCleanup::kJanitor;
  PartitionPeriod partition_period = PartitionPeriod::kDaily;  // kPartitions' range
  int64_t janitor_batch_rows = 1000;
  std::chrono::milliseconds janitor_interval{10000};

  // --- Kafka
  std::string bootstrap_servers;
  bool embedded_kafka = false;  // start librdkafka's mock cluster in process
  std::map<std::string, std::string> kafka_properties;  // any librdkafka property
  // Exactly-once mode (kafka.exactly_once; docs/guarantees.md, "Exactly once into Kafka").
  // Records go into Kafka transactions of whole source transactions with a checkpoint
  // record each (core/exactly_once.h); WAL mode only.
  bool exactly_once = false;
  std::string kafka_transactional_id;  // empty: derived from the stream (StreamIdentity)
  std::chrono::milliseconds kafka_transaction_interval{100};
  std::string checkpoint_topic = "walrelay.checkpoints";

  // --- flow control and timing
  // Measured (bench/README.md, "In-flight caps"): 10,000 events / 8 MiB keep the replay
  // into a broker under 32 MB of RSS at the same rate as 100,000 / 64 MiB.
  int64_t max_in_flight_events = 10000;
  int64_t max_in_flight_bytes = 8ll << 20;
  std::chrono::milliseconds status_interval{1000};  // capped at wal_sender_timeout / 2
  std::chrono::milliseconds shutdown_timeout{10000};
  // How long events of a Kafka topic that does not exist or may not be written are
  // retried (session restarts, /readyz not ready) before they are dead-lettered.
  std::chrono::milliseconds kafka_topic_error_timeout{300'000};
  std::chrono::milliseconds reconnect_min{500};
  std::chrono::milliseconds reconnect_max{30000};
  // While another process reads the slot (an active relay), how often a standby relay
  // tries to take it (with +-20% jitter); it takes over within about two intervals.
  std::chrono::milliseconds standby_interval{1000};
  // When the oldest unconfirmed transaction's events have had no acknowledgement from Kafka
  // for this long, the relay ends its session, lets go of the slot and waits three standby
  // intervals before it tries the slot again, so that the other relay of a pair, which may
  // still reach Kafka, takes over (docs/operations.md section 19). 0 = wait for Kafka
  // however long, holding the slot.
  std::chrono::milliseconds kafka_wait_yield{120'000};

  // --- failure handling
  std::string dead_letter_table = "walrelay_dead_letter";

  // Heartbeat period (0 = off): pg_logical_emit_message(false, kHeartbeatPrefix, <µs>).
  std::chrono::milliseconds heartbeat_interval{0};

  // --- lost-slot recovery (recovery/backfill.h)
  bool recovery_enabled = true;
  std::string progress_table = "walrelay_progress";

  // --- slot guard (lifecycle/slot_guard.h): thresholds on retained WAL, "512MB" or "0.5" (a
  // fraction of max_slot_wal_keep_size)
  std::string guard_warn = "1GB";
  std::string guard_critical = "8GB";
  std::chrono::milliseconds guard_interval{10000};

  // --- operations
  std::string metrics_address;  // host:port for /metrics, /healthz; empty = off
  std::string log_level = "info";
  std::string log_format = "text";  // text | json (src/cli/log_format.h)

  Status Validate() const;

  // source_dsn and source_password, kept apart until libpq gets them (slot::ConnectPg).
  slot::ConnInfo SourceConninfo() const;

  // Whether a slot walrelay creates on a server of this version is a failover slot: the one
  // rule for `run`, lost-slot recovery, republish --create-slot and the start checks.
  bool WantsFailoverSlot(int server_version) const;
};

}  // namespace walrelay::relay
