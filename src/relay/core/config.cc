#include "src/relay/core/config.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "base/sql.h"
#include "base/suggest.h"
#include "slot/pg_error.h"
#include "slot/server_version.h"
#include "src/relay/core/thresholds.h"

namespace walrelay::relay {
namespace {

bool ParseInt(std::string_view text, int* out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && p == text.data() + text.size();
}

}  // namespace

Result<PollShard> ParsePollShard(std::string_view text) {
  PollShard shard;
  if (text.empty()) return shard;
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos || !ParseInt(text.substr(0, slash), &shard.index) ||
      !ParseInt(text.substr(slash + 1), &shard.count) || shard.count < 1 ||
      shard.count > 1024 || shard.index < 0 || shard.index >= shard.count) {
    return InvalidArgumentError("--poll-shard '" + std::string(text) +
                                "': expected I/N with 0 <= I < N <= 1024 (this replica's share "
                                "of the aggregates, e.g. 0/3, 1/3 and 2/3 for three replicas)");
  }
  return shard;
}


Status ApplyOutboxProfile(std::string_view profile, RelayConfig* config) {
  if (profile == "walrelay") {
    config->profile = "walrelay";
    return Status::Ok();
  }
  if (profile != "debezium") {
    return InvalidArgumentError("outbox.profile: expected walrelay or debezium, got '" +
                                std::string(profile) + "'");
  }
  config->profile = "debezium";
  // Debezium's documented outbox table (id uuid, aggregatetype, aggregateid, type,
  // payload jsonb) and the Outbox Event Router's defaults: table.field.event.id=id,
  // table.field.event.key=aggregateid, table.field.event.payload=payload,
  // route.by.field=aggregatetype, route.topic.replacement=outbox.event.${routedByValue}.
  config->columns = OutboxColumns{};
  config->columns.id = "";  // the uuid id orders nothing; recovery orders by transaction
  config->columns.event_id = "id";
  config->columns.aggregate_type = "aggregatetype";
  config->columns.aggregate_id = "aggregateid";
  config->columns.topic = "";
  config->columns.event_type = "type";
  config->columns.payload = "payload";
  config->columns.headers = "";
  config->columns.created_at = "";
  config->topic_template = "outbox.event.${aggregate_type}";
  // The router puts the event id in header `id` and nothing else in headers (the type
  // only with table.fields.additional.placement=type:header:NAME: set event_type=NAME).
  config->header_names = HeaderNames{"id", "", "", std::string(headers::kPosition)};
  // Debezium's record timestamp is the source event's time (the commit).
  config->record_timestamp = RecordTimestamp::kCommit;
  // The connector's default slot.name and publication.name.
  config->slot = "debezium";
  config->publication = "dbz_publication";
  return Status::Ok();
}

namespace {

bool LibpqEnvironmentNamesAServer() {
  for (const char* name : {"PGHOST", "PGHOSTADDR", "PGDATABASE", "PGSERVICE"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return true;
  }
  return false;
}

}  // namespace

slot::ConnInfo RelayConfig::SourceConninfo() const { return {source_dsn, source_password}; }

Status CheckTopicTemplate(std::string_view tmpl) {
  static const std::vector<std::string> kKnown = {"aggregate_type", "event_type", "table"};
  const std::string where = "--outbox-topic-template '" + std::string(tmpl) + "'";
  const auto bad_literal = [&](std::string_view text) -> Status {
    for (char ch : text) {
      if (!IsTopicNameChar(ch)) {
        return InvalidArgumentError(
            where + " has the character '" + std::string(1, ch) +
            "', which Kafka refuses in a topic name (letters, digits, '.', '_' and '-' only): "
            "every event would be dead-lettered. Fix the template");
      }
    }
    return Status::Ok();
  };
  size_t literal_length = 0;
  bool has_placeholder = false;
  size_t i = 0;
  while (i < tmpl.size()) {
    const size_t open = tmpl.find("${", i);
    if (open == std::string_view::npos) {
      WALRELAY_RETURN_IF_ERROR(bad_literal(tmpl.substr(i)));
      literal_length += tmpl.size() - i;
      break;
    }
    WALRELAY_RETURN_IF_ERROR(bad_literal(tmpl.substr(i, open - i)));
    literal_length += open - i;
    const size_t close = tmpl.find('}', open + 2);
    if (close == std::string_view::npos) {
      return InvalidArgumentError(where + " opens a placeholder '${' without its '}'");
    }
    const std::string name(tmpl.substr(open + 2, close - open - 2));
    if (std::find(kKnown.begin(), kKnown.end(), name) == kKnown.end()) {
      return InvalidArgumentError(where + " has the unknown placeholder ${" + name + "}" +
                                  DidYouMean(name, kKnown) +
                                  " (known: ${aggregate_type}, ${event_type}, ${table})");
    }
    has_placeholder = true;
    i = close + 1;
  }
  if (literal_length > 249) {
    return InvalidArgumentError(where + " is longer than Kafka's 249-character topic names");
  }
  if (!has_placeholder && (tmpl == "." || tmpl == "..")) {
    return InvalidArgumentError(where + " is a name Kafka refuses ('.' and '..')");
  }
  return Status::Ok();
}

Status RelayConfig::Validate() const {
  for (const std::string& t : allowed_topics) {
    const std::string_view name =
        !t.empty() && t.back() == '*' ? std::string_view(t).substr(0, t.size() - 1) : t;
    if (name.empty() || !std::all_of(name.begin(), name.end(), IsTopicNameChar)) {
      return InvalidArgumentError("outbox.allowed_topics: '" + t +
                                  "' is neither a topic name nor a prefix ending in '*' "
                                  "(e.g. payments.*)");
    }
  }
  // Without a DSN libpq's environment decides (as for psql, pg_recvlogical and `walrelay
  // lag`), but only when it names a server or service: a relay started with neither is
  // more likely misconfigured than meant for the local default socket.
  if (source_dsn.empty() && !LibpqEnvironmentNamesAServer()) {
    return InvalidArgumentError(
        "no source database: set --source-dsn (or WALRELAY_SOURCE_DSN, or source.dsn in the "
        "config file), e.g. 'host=/var/run/postgresql dbname=app user=walrelay', or libpq's "
        "PGHOST/PGDATABASE/PGSERVICE (with PGPORT, PGUSER)");
  }
  if (bootstrap_servers.empty() && !embedded_kafka) {
    return InvalidArgumentError(
        "no Kafka: set --kafka-bootstrap-servers host:port (or --kafka-embedded true for a demo)");
  }
  if (plugin != "pgoutput" && plugin != "wal2json") {
    return InvalidArgumentError("--source-plugin '" + plugin + "': expected pgoutput or wal2json");
  }
  if (slot.empty() || publication.empty()) {
    return InvalidArgumentError("--source-slot and --source-publication must not be empty");
  }
  if (source_mode == SourceMode::kPoll) {
    if (tables.empty()) {
      return InvalidArgumentError(
          "--source-mode poll reads outbox tables: give at least one --source-table");
    }
    if (!message_prefix.empty()) {
      return InvalidArgumentError(
          "--source-message-prefix with --source-mode poll: table-less events "
          "(pg_logical_emit_message) exist only in the WAL, a poller never sees them. Write "
          "events to an outbox table, or use --source-mode wal");
    }
    if (columns.id.empty()) {
      return InvalidArgumentError(
          "--source-mode poll orders rows by an integer id column (outbox.columns id=...), and "
          "none is configured (the debezium profile's id is a uuid, which orders nothing): add "
          "a bigint identity column and name it");
    }
    if (poll_batch_rows < 1 || poll_batch_rows > 10000) {
      return InvalidArgumentError("--poll-batch-rows " + std::to_string(poll_batch_rows) +
                                  ": expected 1..10000 (50-200 is the usual range)");
    }
    if (poll_max_attempts < 1) {
      return InvalidArgumentError("--poll-max-attempts must be at least 1");
    }
    if (auto shard = ParsePollShard(poll_shard); !shard.ok()) return shard.status();
  }
  if (tables.empty() && message_prefix.empty()) {
    return InvalidArgumentError(
        "nothing to relay: give at least one --source-table or a --source-message-prefix");
  }
  // Names follow SQL's rules (base/sql.h); outbox tables must name their schema, so that
  // no search_path decides which table is the outbox.
  for (const auto& t : tables) {
    auto name = ParseQualifiedName(t);
    if (!name.ok()) return name.status().WithContext("--source-table");
    if (name->schema.empty()) {
      return InvalidArgumentError("--source-table '" + t +
                                  "' must be schema-qualified, e.g. public." + t);
    }
  }
  for (const auto& [flag, value] : {std::pair{"--dead-letter-table", &dead_letter_table},
                                    std::pair{"--recovery-progress-table", &progress_table}}) {
    if (auto name = ParseQualifiedName(*value); !name.ok()) {
      return name.status().WithContext(flag);
    }
  }
  if (columns.event_id.empty() || columns.aggregate_id.empty() || columns.event_type.empty() ||
      columns.payload.empty()) {
    return InvalidArgumentError(
        "--outbox-column: event_id, aggregate_id, event_type and payload are required columns");
  }
  {
    const HeaderNames& h = header_names;
    if (h.event_id.empty() || h.position.empty()) {
      return InvalidArgumentError(
          "outbox.headers: event_id and position need a header name (consumers dedup on the "
          "event id; the position says where an event came from); only event_type and "
          "aggregate_type may be empty (not written)");
    }
    const std::string* names[] = {&h.event_id, &h.event_type, &h.aggregate_type, &h.position};
    for (size_t i = 0; i < 4; ++i) {
      for (size_t j = i + 1; j < 4; ++j) {
        if (!names[i]->empty() && headers::SameNameIgnoringCase(*names[i], *names[j])) {
          return InvalidArgumentError("outbox.headers: two headers are named '" + *names[i] +
                                      "'; give each its own name");
        }
      }
    }
  }
  if (outbox_retention.count() < 0 || janitor_batch_rows < 1 || janitor_batch_rows > 100000 ||
      janitor_interval.count() < 10) {
    return InvalidArgumentError(
        "outbox janitor: retention_ms >= 0 (0 = off), janitor_batch_rows 1..100000, "
        "janitor_interval_ms >= 10");
  }
  if (outbox_cleanup == OutboxCleanup::kSameTransaction) {
    if (recovery_enabled) {
      return InvalidArgumentError(
          "outbox.cleanup same-transaction: writers delete each outbox row in the transaction "
          "that inserted it, so lost-slot recovery has no rows to republish from. Set "
          "--recovery-enabled false to run knowingly: a lost slot then stops walrelay (exit "
          "3) and the events it had not delivered are gone; bound max_slot_wal_keep_size "
          "generously and alert on slot lag (docs/operations.md, section 4)");
    }
    if (source_mode == SourceMode::kPoll) {
      return InvalidArgumentError(
          "outbox.cleanup same-transaction with --source-mode poll: a poller reads rows, and "
          "the writers delete them before anyone can; use the janitor (outbox.retention_ms)");
    }
    if (outbox_retention.count() > 0) {
      return InvalidArgumentError(
          "outbox.cleanup same-transaction leaves no row to delete: set outbox.retention_ms 0");
    }
  }
  if (outbox_cleanup == OutboxCleanup::kPartitions) {
    if (outbox_retention.count() <= 0) {
      return InvalidArgumentError(
          "outbox.cleanup partitions drops partitions older than outbox.retention_ms: set it "
          "(e.g. 86400000 for a day)");
    }
    for (const auto& t : tables) {
      auto name = ParseQualifiedName(t);
      if (name.ok() && name->name.size() > 52) {  // + "_pYYYYMMDDHH" within 63 bytes
        return InvalidArgumentError("outbox.cleanup partitions: the name of table " + t +
                                    " is longer than 52 bytes, too long for its partitions' "
                                    "names (<table>_pYYYYMMDDHH, 63 bytes at most)");
      }
    }
  }
  if (outbox_retention.count() > 0 && (columns.created_at.empty() || tables.empty())) {
    return InvalidArgumentError(
        "outbox.retention_ms needs outbox tables with a timestamp column (outbox.columns "
        "created_at): the janitor deletes rows older than the retention by it");
  }
  if (topic_template.empty() && columns.topic.empty()) {
    return InvalidArgumentError(
        "no way to choose a topic: set --outbox-topic-template or a topic column");
  }
  WALRELAY_RETURN_IF_ERROR(CheckTopicTemplate(topic_template));
  if (max_in_flight_events < 1 || max_in_flight_bytes < 1024) {
    return InvalidArgumentError(
        "--flow-max-in-flight-events must be >= 1 and --flow-max-in-flight-bytes >= 1024");
  }
  if (status_interval.count() < 10 || reconnect_min.count() < 1 || reconnect_max < reconnect_min ||
      shutdown_timeout.count() < 0 || kafka_topic_error_timeout.count() < 0 ||
      standby_interval.count() < 10 ||
      (kafka_wait_yield.count() != 0 && kafka_wait_yield.count() < 1000)) {
    return InvalidArgumentError(
        "timing options out of range: status interval >= 10 ms, 1 <= reconnect-min <= "
        "reconnect-max, shutdown timeout, heartbeat interval >= 0, "
        "guard interval >= 100 ms, standby interval >= 10 ms, kafka wait yield 0 or >= 1000 ms");
  }
  if (exactly_once) {
    if (source_mode == SourceMode::kPoll) {
      return InvalidArgumentError(
          "--kafka-exactly-once needs --source-mode wal: its checkpoint is a position in the "
          "WAL (commit LSNs in commit order), which a poller does not have");
    }
    if (kafka_transaction_interval.count() < 1 || kafka_transaction_interval.count() > 60000) {
      return InvalidArgumentError(
          "--kafka-transaction-interval-ms " + std::to_string(kafka_transaction_interval.count()) +
          ": expected 1..60000 (events are invisible to read_committed consumers until their "
          "Kafka transaction commits)");
    }
    if (checkpoint_topic.empty() ||
        !std::all_of(checkpoint_topic.begin(), checkpoint_topic.end(), IsTopicNameChar)) {
      return InvalidArgumentError("--kafka-checkpoint-topic '" + checkpoint_topic +
                                  "' is not a topic name (letters, digits, '.', '_', '-')");
    }
    if (kafka_properties.contains("transactional.id")) {
      return InvalidArgumentError(
          "--kafka-property transactional.id: set --kafka-transactional-id instead (or leave "
          "it derived from the stream, so that every relay of the slot shares it)");
    }
  } else if (!kafka_transactional_id.empty() || kafka_properties.contains("transactional.id")) {
    return InvalidArgumentError(
        "a transactional.id without --kafka-exactly-once true: the idempotent mode does not "
        "use transactions. Add --kafka-exactly-once true, or remove the transactional.id");
  }
  for (const char* key : {"enable.idempotence", "acks"}) {
    auto it = kafka_properties.find(key);
    if (it == kafka_properties.end()) continue;
    bool weakened = std::string(key) == "acks" ? (it->second != "all" && it->second != "-1")
                                               : it->second != "true";
    if (weakened) {
      return InvalidArgumentError(std::string("--kafka-property ") + key + "=" + it->second +
                                  " would allow lost or duplicated-out-of-order events; walrelay "
                                  "requires enable.idempotence=true and acks=all");
    }
  }
  for (const char* key : {"message.timeout.ms", "delivery.timeout.ms"}) {
    auto it = kafka_properties.find(key);
    if (it != kafka_properties.end() && it->second != "0") {
      return InvalidArgumentError(std::string("--kafka-property ") + key + "=" + it->second +
                                  " would let librdkafka give up on a record and deliver later "
                                  "ones of its partition first; walrelay never times records "
                                  "out (the slot holds them while Kafka is away): remove it");
    }
  }
  for (const auto& [flag, value] :
       {std::pair{"--guard-warn", &guard_warn}, std::pair{"--guard-critical", &guard_critical}}) {
    auto t = Threshold::Parse(*value);
    if (!t.ok()) return InvalidArgumentError(std::string(flag) + ": " + t.status().message());
  }
  {
    // Both of one kind (a size, or a fraction of max_slot_wal_keep_size): warn must come
    // first, else the warning never shows before the page.
    const Threshold warn = *Threshold::Parse(guard_warn), critical = *Threshold::Parse(guard_critical);
    const bool reversed =
        warn.kind == critical.kind &&
        ((warn.kind == Threshold::Kind::kBytes && warn.bytes > critical.bytes) ||
         (warn.kind == Threshold::Kind::kFraction && warn.fraction > critical.fraction));
    if (reversed) {
      return InvalidArgumentError("--guard-warn (" + warn.ToString() +
                                  ") is above --guard-critical (" + critical.ToString() +
                                  "): the warning would never come before the critical state. "
                                  "Fix: make --guard-warn the smaller one");
    }
  }
  if (log_format != "text" && log_format != "json") {
    return InvalidArgumentError("ops.log_format: expected text or json, got '" + log_format + "'");
  }
  if (log_level != "trace" && log_level != "debug" && log_level != "info" && log_level != "warn" &&
      log_level != "error") {
    return InvalidArgumentError("--ops-log-level must be trace, debug, info, warn or error");
  }
  return Status::Ok();
}

bool RelayConfig::WantsFailoverSlot(int server_version) const {
  return slot_failover && slot::SupportsFailoverSlots(server_version);
}

}  // namespace walrelay::relay
