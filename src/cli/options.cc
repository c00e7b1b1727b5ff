#include "src/cli/options.h"

#include <libpq-fe.h>
#include <sys/stat.h>

#include <toml++/toml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "base/suggest.h"
#include "src/relay/core/thresholds.h"

namespace walrelay::cli {

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kInvalidArgument:
    // Found against the server at start (a missing database, table or slot; wal_level; a
    // missing privilege or password): a restart with the same configuration fails the same
    // way, so the unit's RestartPreventExitStatus stops restarting and an operator acts.
    // Run() returns these only from its start checks: its sessions retry them.
    case StatusCode::kFailedPrecondition:
    case StatusCode::kNotFound:
    case StatusCode::kPermissionDenied:
      return kExitUsage;
    case StatusCode::kDataLoss:
      return kExitNeedsOperator;
    default:
      return kExitFailure;
  }
}

const char* const kRunExitCodesHelp =
    "Exit codes: 0 stopped cleanly (every acked transaction confirmed); 1 a runtime failure "
    "a restart may cure; 2 bad usage or configuration, including what the start checks find "
    "on the server (a missing database, table, publication or slot; wal_level; a missing "
    "privilege or password): a restart fails the same way; 3 "
    "refused to go on without an operator (the slot was lost and recovery is off or "
    "unsound: restarting would lose or repeat events; the log says what to do). For "
    "systemd: Restart=on-failure with RestartPreventExitStatus=2 3.\n\n"
    "Kafka security goes in librdkafka properties, best in a file only walrelay's user can "
    "read (--kafka-properties-file, kcat's -F format), e.g. SASL/SCRAM over TLS:\n"
    "  security.protocol=SASL_SSL  sasl.mechanisms=SCRAM-SHA-512  sasl.username=walrelay\n"
    "  sasl.password=...  ssl.ca.location=/etc/walrelay/kafka-ca.pem\n"
    "SASL/PLAIN: the same with sasl.mechanisms=PLAIN; mutual TLS: security.protocol=SSL with "
    "ssl.certificate.location and ssl.key.location. Values are never logged. More: "
    "docs/operations.md, section 12.";

namespace {

using relay::RelayConfig;
using Values = std::vector<std::string>;

Result<int64_t> ParseInt(const OptionSpec& spec, const std::string& text) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) {
    return InvalidArgumentError(spec.Flag() + ": expected an integer, got '" + text + "'");
  }
  return v;
}

Result<bool> ParseBool(const OptionSpec& spec, const std::string& text) {
  if (text == "true" || text == "1" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "0" || text == "no" || text == "off") return false;
  return InvalidArgumentError(spec.Flag() + ": expected true or false, got '" + text + "'");
}

Result<std::pair<std::string, std::string>> SplitKv(const OptionSpec& spec,
                                                    const std::string& text) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return InvalidArgumentError(spec.Flag() +
                                ": expected NAME=VALUE, got a value without a name and '=' (not "
                                "shown: it may hold a secret)");
  }
  return std::make_pair(text.substr(0, eq), text.substr(eq + 1));
}

std::string Join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += v[i];
  }
  return out;
}

OptionSpec Str(std::string key, std::string help, std::string RelayConfig::*field,
               bool secret = false) {
  OptionSpec s{std::move(key), OptionKind::kString, std::move(help), secret, nullptr, nullptr};
  s.apply = [field](RelayConfig& c, const Values& v) {
    c.*field = v.back();
    return Status::Ok();
  };
  s.show = [field, secret](const RelayConfig& c) {
    return secret ? std::string("(none)") : (c.*field).empty() ? "(empty)" : c.*field;
  };
  return s;
}

OptionSpec Bool(std::string key, std::string help, bool RelayConfig::*field) {
  OptionSpec s{std::move(key), OptionKind::kBool, std::move(help), false, nullptr, nullptr};
  s.apply = [field, s](RelayConfig& c, const Values& v) -> Status {
    WALRELAY_ASSIGN_OR_RETURN(c.*field, ParseBool(s, v.back()));
    return Status::Ok();
  };
  s.show = [field](const RelayConfig& c) { return std::string(c.*field ? "true" : "false"); };
  return s;
}

OptionSpec Int(std::string key, std::string help, int64_t RelayConfig::*field) {
  OptionSpec s{std::move(key), OptionKind::kInt, std::move(help), false, nullptr, nullptr};
  s.apply = [field, s](RelayConfig& c, const Values& v) -> Status {
    WALRELAY_ASSIGN_OR_RETURN(c.*field, ParseInt(s, v.back()));
    return Status::Ok();
  };
  s.show = [field](const RelayConfig& c) { return std::to_string(c.*field); };
  return s;
}

// A size: bytes, or with a unit as the guard thresholds take it ("8MB", "512kB"; 1024-based,
// relay::ParseByteSize), so that every size option reads the same.
OptionSpec Bytes(std::string key, std::string help, int64_t RelayConfig::*field) {
  OptionSpec s{std::move(key), OptionKind::kInt, std::move(help), false, nullptr, nullptr};
  s.apply = [field, s](RelayConfig& c, const Values& v) -> Status {
    auto bytes = relay::ParseByteSize(v.back());
    if (!bytes.ok()) return InvalidArgumentError(s.Flag() + ": " + bytes.status().message());
    c.*field = static_cast<int64_t>(*bytes);
    return Status::Ok();
  };
  s.show = [field](const RelayConfig& c) { return std::to_string(c.*field); };
  return s;
}

OptionSpec Millis(std::string key, std::string help,
                  std::chrono::milliseconds RelayConfig::*field) {
  OptionSpec s{std::move(key), OptionKind::kInt, std::move(help), false, nullptr, nullptr};
  s.apply = [field, s](RelayConfig& c, const Values& v) -> Status {
    WALRELAY_ASSIGN_OR_RETURN(int64_t ms, ParseInt(s, v.back()));
    c.*field = std::chrono::milliseconds(ms);
    return Status::Ok();
  };
  s.show = [field](const RelayConfig& c) { return std::to_string((c.*field).count()); };
  return s;
}

// A string option with a fixed set of values, each naming a value of the field's enum.
template <typename T>
OptionSpec Choice(std::string key, std::string help, T RelayConfig::*field,
                  std::vector<std::pair<std::string, T>> choices) {
  OptionSpec s{std::move(key), OptionKind::kString, std::move(help), false, nullptr, nullptr};
  s.apply = [s, field, choices](RelayConfig& c, const Values& v) -> Status {
    std::string names;
    for (const auto& [name, value] : choices) {
      if (name == v.back()) {
        c.*field = value;
        return Status::Ok();
      }
      names += (names.empty() ? "" : " or ") + name;
    }
    return InvalidArgumentError(s.Flag() + ": expected " + names + ", got '" + v.back() + "'");
  };
  s.show = [field, choices](const RelayConfig& c) {
    for (const auto& [name, value] : choices) {
      if (value == c.*field) return name;
    }
    return std::string("?");
  };
  return s;
}

// A FIELD=VALUE map option over the string fields that `fields` selects in a config.
OptionSpec FieldMap(std::string key, std::string help,
                    std::function<std::vector<std::pair<std::string_view, std::string*>>(
                        RelayConfig&)> fields,
                    std::string shown_default) {
  OptionSpec s{std::move(key), OptionKind::kMap, std::move(help), false, nullptr, nullptr};
  s.apply = [s, fields](RelayConfig& c, const Values& v) -> Status {
    const auto targets = fields(c);
    for (const auto& kv : v) {
      WALRELAY_ASSIGN_OR_RETURN(auto p, SplitKv(s, kv));
      bool found = false;
      for (const auto& [name, target] : targets) {
        if (name == p.first) {
          *target = p.second;
          found = true;
        }
      }
      if (!found) {
        std::string known;
        for (const auto& [name, target] : targets) known += (known.empty() ? "" : ", ") + std::string(name);
        return InvalidArgumentError(s.Flag() + ": unknown field '" + p.first + "'; fields are " +
                                    known);
      }
    }
    return Status::Ok();
  };
  s.show = [shown_default](const RelayConfig&) { return shown_default; };
  return s;
}

std::vector<OptionSpec> BuildRunOptions() {
  std::vector<OptionSpec> o;
  o.push_back(Str("source.dsn",
                  "libpq connection string or URI of the source database (the outbox's); "
                  "unset: libpq's PGHOST/PGDATABASE/PGSERVICE environment. Put the password in "
                  "PGPASSWORD, ~/.pgpass or source.password_file, not here.",
                  &RelayConfig::source_dsn));
  {
    OptionSpec s{"source.password_file",
                 OptionKind::kString,
                 "File whose first line is the source password (a trailing CR is dropped); never "
                 "logged. Refused unless only its owner may read it (chmod 600), like .pgpass.",
                 true,
                 nullptr,
                 nullptr};
    s.apply = [](RelayConfig& c, const Values& v) -> Status {
      Result<std::string> password = slot::ReadPasswordFile(v.back());
      if (!password.ok()) return password.status().WithContext("--source-password-file");
      c.source_password = std::move(password).value();
      return Status::Ok();
    };
    s.show = [](const RelayConfig&) { return std::string("(none)"); };
    o.push_back(std::move(s));
  }
  o.push_back(Str("source.slot", "Logical replication slot walrelay reads (one reader at a time).",
                  &RelayConfig::slot));
  o.push_back(Str("source.publication", "Publication that covers the outbox tables.",
                  &RelayConfig::publication));
  o.push_back(Str("source.plugin",
                  "Output plugin of the slot: pgoutput, or wal2json (format-version 2; the "
                  "wal2json extension must be installed on the server).",
                  &RelayConfig::plugin));
  o.push_back(Bool("source.create_slot",
                   "Create the publication and the slot when missing (needs ownership of the "
                   "tables for the publication).",
                   &RelayConfig::create_slot));
  o.push_back(Bool("source.slot_failover",
                   "PostgreSQL 17+: create the slot with failover enabled, so that standbys "
                   "with sync_replication_slots keep it and a promoted standby has it "
                   "(docs/operations.md, failover). Ignored before 17.",
                   &RelayConfig::slot_failover));
  {
    OptionSpec s{"source.tables",
                 OptionKind::kList,
                 "Schema-qualified outbox tables (repeat the flag, or a TOML array).",
                 false,
                 nullptr,
                 nullptr};
    s.apply = [](RelayConfig& c, const Values& v) {
      c.tables = v;
      return Status::Ok();
    };
    s.show = [](const RelayConfig& c) { return Join(c.tables, ", "); };
    o.push_back(std::move(s));
  }
  o.push_back(Str("source.message_prefix",
                  "Prefix of transactional pg_logical_emit_message() calls that carry table-less "
                  "outbox events (a JSON envelope with the outbox fields); empty: off (any role "
                  "that can log in may emit messages, so they are opt-in). walrelay.outbox is "
                  "the prefix outbox::AppendMessage writes; while off, such messages are "
                  "dead-lettered with the reason.",
                  &RelayConfig::message_prefix));
  o.push_back(Choice("source.mode",
                     "Where events come from: wal (the logical slot, in commit order; the "
                     "default) or poll (SELECT ... FOR UPDATE SKIP LOCKED on the outbox tables "
                     "for databases without a slot; needs `walrelay setup --source-mode poll`; "
                     "same records, headers, dead letters and metrics).",
                     &RelayConfig::source_mode,
                     {{"wal", relay::SourceMode::kWal}, {"poll", relay::SourceMode::kPoll}}));
  o.push_back(Int("poll.batch_rows",
                  "Poll mode: rows per polling transaction (1-10000; 50-200 is the usual range).",
                  &RelayConfig::poll_batch_rows));
  o.push_back(Millis("poll.interval_ms",
                     "Poll mode: pause after a poll that found no row to publish.",
                     &RelayConfig::poll_interval));
  o.push_back(Int("poll.max_attempts",
                  "Poll mode: failed publishes of a row (its topic missing or not writable) "
                  "before it is dead-lettered; attempts are kafka.topic_error_timeout_ms / this "
                  "apart.",
                  &RelayConfig::poll_max_attempts));
  o.push_back(Str("poll.shard",
                  "Poll mode: this replica's share of the aggregates as I/N (0/3, 1/3, 2/3 for "
                  "three replicas); empty = all. Several replicas must be sharded to keep "
                  "per-aggregate order.",
                  &RelayConfig::poll_shard));
  o.push_back(Bool("poll.wait_for_older_transactions",
                   "Poll mode: publish a row only after every older transaction ended, so a "
                   "transaction that took a smaller id and commits later is not overtaken "
                   "(per-aggregate order); a long-open writing transaction delays publishing.",
                   &RelayConfig::poll_wait_for_older_transactions));
  {
    OptionSpec s{"outbox.profile",
                 OptionKind::kString,
                 "Defaults for a family of outbox tables, applied before every other option (each "
                 "stays overridable): walrelay (the documented schema), or debezium (Debezium's "
                 "outbox table and Outbox Event Router defaults: columns id, aggregatetype, "
                 "aggregateid, type, payload; topic outbox.event.${aggregate_type}; event id "
                 "header id; commit-time timestamps; slot debezium, publication "
                 "dbz_publication; docs/migrating-from-debezium.md).",
                 false,
                 nullptr,
                 nullptr};
    s.apply = [](RelayConfig& c, const Values& v) {
      return relay::ApplyOutboxProfile(v.back(), &c);
    };
    s.show = [](const RelayConfig& c) { return c.profile; };
    o.push_back(std::move(s));
  }
  o.push_back(FieldMap(
      "outbox.columns",
      "Column names of the outbox table as FIELD=COLUMN (fields: id, event_id, aggregate_type, "
      "aggregate_id, topic, event_type, payload, headers, created_at). An empty COLUMN marks an "
      "optional column as absent.",
      [](RelayConfig& c) -> std::vector<std::pair<std::string_view, std::string*>> {
        auto& col = c.columns;
        return {{"id", &col.id},
                {"event_id", &col.event_id},
                {"aggregate_type", &col.aggregate_type},
                {"aggregate_id", &col.aggregate_id},
                {"topic", &col.topic},
                {"event_type", &col.event_type},
                {"payload", &col.payload},
                {"headers", &col.headers},
                {"created_at", &col.created_at}};
      },
      "the documented schema's names"));
  o.push_back(FieldMap(
      "outbox.headers",
      "Names of the Kafka headers walrelay writes, as FIELD=NAME (fields: event_id, "
      "event_type, aggregate_type, position; defaults event_id, event_type, aggregate_type, "
      "walrelay.position). An empty NAME for event_type or aggregate_type leaves that header "
      "out. Consumers with the inbox library must read the same event id header.",
      [](RelayConfig& c) -> std::vector<std::pair<std::string_view, std::string*>> {
        auto& h = c.header_names;
        return {{"event_id", &h.event_id},
                {"event_type", &h.event_type},
                {"aggregate_type", &h.aggregate_type},
                {"position", &h.position}};
      },
      "the contract's names"));
  o.push_back(Choice("outbox.key_format",
                     "How the record key carries the aggregate id: raw (its text), json-string "
                     "(a JSON string literal, as Kafka Connect's JsonConverter with "
                     "schemas.enable=false writes it) or connect-json (JsonConverter's "
                     "{\"schema\":...,\"payload\":...} envelope with schemas.enable=true, Kafka's "
                     "default, as Debezium writes it). Partitions follow the key's bytes: "
                     "match what your consumers' producer wrote.",
                     &RelayConfig::key_format,
                     {{"raw", relay::TextFormat::kRaw},
                      {"json-string", relay::TextFormat::kJsonString},
                      {"connect-json", relay::TextFormat::kConnectJson}}));
  o.push_back(Choice("outbox.value_format",
                     "How the record value carries a text payload: raw (its text, e.g. the "
                     "jsonb), json-string (a JSON string literal of it, as JsonConverter with "
                     "schemas.enable=false writes a Debezium outbox payload) or connect-json "
                     "(JsonConverter's envelope with schemas.enable=true, the schema of a jsonb "
                     "column as Debezium writes it) or json-compact (the JSON text without "
                     "whitespace between tokens, as Debezium's router writes it with "
                     "table.expand.json.payload=true). A bytea payload is always its bytes.",
                     &RelayConfig::value_format,
                     {{"raw", relay::TextFormat::kRaw},
                      {"json-string", relay::TextFormat::kJsonString},
                      {"connect-json", relay::TextFormat::kConnectJson},
                      {"json-compact", relay::TextFormat::kCompactJson}}));
  o.push_back(Choice("outbox.format",
                     "What a record looks like: walrelay (the payload as the value, the "
                     "contract's headers), cloudevents-binary (CloudEvents 1.0 Kafka binding, "
                     "binary mode: ce_specversion, ce_id = event id, ce_source, ce_type = event "
                     "type, ce_time = commit time and content-type headers, the payload as the "
                     "value) or cloudevents-structured (the value is one CloudEvents JSON "
                     "document with the payload as data). The contract's headers are on every "
                     "record in each format (docs/inbox-contract.md).",
                     &RelayConfig::record_format,
                     {{"walrelay", relay::RecordFormat::kWalrelay},
                      {"cloudevents-binary", relay::RecordFormat::kCloudEventsBinary},
                      {"cloudevents-structured", relay::RecordFormat::kCloudEventsStructured}}));
  o.push_back(Str("outbox.cloudevents_source",
                  "The CloudEvents source attribute (a URI-reference naming where the events "
                  "come from, e.g. /billing/payments) with a cloudevents format; empty: "
                  "/walrelay/<slot>.",
                  &RelayConfig::cloudevents_source));
  o.push_back(Str("outbox.topic_template",
                  "Topic when the row's topic column is absent or NULL; ${aggregate_type}, "
                  "${event_type} and ${table} are substituted.",
                  &RelayConfig::topic_template));
  {
    OptionSpec s{"outbox.allowed_topics",
                 OptionKind::kList,
                 "Topics walrelay may publish to: names, or prefixes ending in '*' "
                 "(payments.*). Empty: any. Anything else is dead-lettered with the reason "
                 "(whoever can write the outbox or call pg_logical_emit_message picks the "
                 "topic).",
                 false,
                 nullptr,
                 nullptr};
    s.apply = [](RelayConfig& c, const Values& v) {
      c.allowed_topics = v;
      return Status::Ok();
    };
    s.show = [](const RelayConfig& c) {
      return c.allowed_topics.empty() ? std::string("(any)") : Join(c.allowed_topics, ", ");
    };
    o.push_back(std::move(s));
  }
  o.push_back(Millis("outbox.retention_ms",
                     "The outbox janitor: delete outbox rows older than this (by created_at) "
                     "once they are delivered (their transaction precedes the recorded "
                     "recovery bound), in small batches; 0 = off. Never deletes a row that is "
                     "not confirmed, nor one lost-slot recovery could need.",
                     &RelayConfig::outbox_retention));
  o.push_back(Choice("outbox.cleanup",
                     "How delivered outbox rows go away: janitor (deletes rows older than "
                     "outbox.retention_ms once delivered, in batches; 0 = the application's "
                     "job), partitions (`walrelay setup` range-partitions the outbox on "
                     "created_at; the janitor drops whole partitions older than the retention "
                     "once all their rows are delivered) or same-transaction (writers delete "
                     "each row in the transaction that inserted it; needs --recovery-enabled "
                     "false: a lost slot cannot be republished from an empty table).",
                     &RelayConfig::outbox_cleanup,
                     {{"janitor", relay::OutboxCleanup::kJanitor},
                      {"partitions", relay::OutboxCleanup::kPartitions},
                      {"same-transaction", relay::OutboxCleanup::kSameTransaction}}));
  o.push_back(Choice("outbox.partition_period",
                     "outbox.cleanup partitions: the range of one partition, daily or hourly "
                     "(UTC).",
                     &RelayConfig::partition_period,
                     {{"daily", relay::PartitionPeriod::kDaily},
                      {"hourly", relay::PartitionPeriod::kHourly}}));
  o.push_back(Int("outbox.janitor_batch_rows",
                  "Rows the janitor deletes per statement (at most 10 statements a second).",
                  &RelayConfig::janitor_batch_rows));
  o.push_back(Millis("outbox.janitor_interval_ms",
                     "Pause between janitor rounds once a round found nothing more to delete.",
                     &RelayConfig::janitor_interval));
  o.push_back(Str("kafka.bootstrap_servers", "Kafka bootstrap servers (host:port,...).",
                  &RelayConfig::bootstrap_servers));
  o.push_back(Bool("kafka.embedded",
                   "Start librdkafka's mock cluster in process instead of connecting to Kafka "
                   "(demo and tests only: records live in memory).",
                   &RelayConfig::embedded_kafka));
  {
    OptionSpec s{"kafka.properties_file",
                 OptionKind::kString,
                 "File of librdkafka properties, one NAME=VALUE per line, '#' comments (kcat's "
                 "-F format); kafka.properties given otherwise win over it. Values are never "
                 "logged.",
                 true,
                 nullptr,
                 nullptr};
    s.apply = [s](RelayConfig& c, const Values& v) -> Status {
      std::ifstream in(v.back());
      if (!in) return InvalidArgumentError(s.Flag() + ": cannot read '" + v.back() + "'");
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        const size_t first = line.find_first_not_of(" \t");
        if (first == std::string::npos || line[first] == '#') continue;
        auto p = SplitKv(s, line.substr(first));
        if (!p.ok()) {
          return InvalidArgumentError(s.Flag() + ": '" + v.back() + "' line " +
                                      std::to_string(n) + ": " + p.status().message());
        }
        c.kafka_properties.emplace(p->first, p->second);  // explicit properties win
      }
      return Status::Ok();
    };
    s.show = [](const RelayConfig&) { return std::string("(none)"); };
    o.push_back(std::move(s));
  }
  {
    OptionSpec s{"kafka.properties",
                 OptionKind::kMap,
                 "Any librdkafka producer property as NAME=VALUE (repeatable; a TOML table, "
                 "dotted names quoted or not; in the environment variable several separated "
                 "by newlines, so values may hold commas). enable.idempotence=true, acks=all "
                 "and message.timeout.ms=0 (records never time out) cannot be changed.",
                 false,
                 nullptr,
                 nullptr};
    s.apply = [s](RelayConfig& c, const Values& v) -> Status {
      for (const auto& value : v) {
        std::istringstream lines(value);
        for (std::string kv; std::getline(lines, kv);) {
          if (!kv.empty() && kv.back() == '\r') kv.pop_back();
          if (kv.empty()) continue;
          WALRELAY_ASSIGN_OR_RETURN(auto p, SplitKv(s, kv));
          c.kafka_properties[p.first] = p.second;
        }
      }
      return Status::Ok();
    };
    s.show = [](const RelayConfig&) { return std::string("(none)"); };
    o.push_back(std::move(s));
  }
  o.push_back(Choice("kafka.record_timestamp",
                     "The Kafka record's timestamp: produce (when walrelay sends it) or commit "
                     "(the source transaction's commit time, as Debezium sets it; rows "
                     "republished by lost-slot recovery get the produce time).",
                     &RelayConfig::record_timestamp,
                     {{"produce", relay::RecordTimestamp::kProduce},
                      {"commit", relay::RecordTimestamp::kCommit}}));
  o.push_back(Millis("kafka.topic_error_timeout_ms",
                     "How long events of a topic that does not exist or that walrelay may not "
                     "write are retried (session restarts; /readyz names the topic) before "
                     "they are dead-lettered with the reason. The other topics' events wait "
                     "meanwhile, so keep it short enough for them.",
                     &RelayConfig::kafka_topic_error_timeout));
  o.push_back(Bool("kafka.exactly_once",
                   "Exactly once into Kafka (WAL mode): a transactional producer puts whole "
                   "source transactions, with a checkpoint record of their position, into "
                   "Kafka transactions; a restarted or take-over relay skips what the "
                   "checkpoint says Kafka has, and fences the relay it replaces. Consumers "
                   "read with isolation.level=read_committed to see each event once and no "
                   "half of a source transaction. Needs the checkpoint topic (`walrelay "
                   "setup` creates it) and transactional ACLs (docs/guarantees.md, exactly "
                   "once; docs/operations.md, section 17).",
                   &RelayConfig::exactly_once));
  o.push_back(Str("kafka.transactional_id",
                  "kafka.exactly_once: the producer's transactional.id; empty = derived from the "
                  "stream (walrelay-<system identifier>-<database>-<slot>, printed at start), so "
                  "every relay of the slot shares it and a take-over fences the relay it "
                  "replaces. Set it only to match ACLs: every relay of one slot needs the same.",
                  &RelayConfig::kafka_transactional_id));
  o.push_back(Millis("kafka.transaction_interval_ms",
                     "kafka.exactly_once: how long a Kafka transaction collects source "
                     "transactions before it commits (at the next source commit). Events become "
                     "visible to read_committed consumers at the commit, so this adds up to its "
                     "length to their latency; larger amortises the commit's round trips. A "
                     "source transaction is never split, whatever its size.",
                     &RelayConfig::kafka_transaction_interval));
  o.push_back(Str("kafka.checkpoint_topic",
                  "kafka.exactly_once: the compacted topic (one partition) where each Kafka "
                  "transaction records the position of its last source transaction, under the "
                  "stream's key; read at every start. `walrelay setup` creates it.",
                  &RelayConfig::checkpoint_topic));
  o.push_back(Int("flow.max_in_flight_events",
                  "Events produced but not yet acked before reading the stream pauses "
                  "(backpressure); also bounds the duplicates a crash can cause.",
                  &RelayConfig::max_in_flight_events));
  o.push_back(Bytes("flow.max_in_flight_bytes",
                  "Bytes of produced, unacked records before reading pauses (a number, or "
                  "with a unit: 8MB, 512kB).",
                  &RelayConfig::max_in_flight_bytes));
  o.push_back(Millis("flow.status_interval_ms",
                     "Standby status update period in ms (capped at wal_sender_timeout / 2).",
                     &RelayConfig::status_interval));
  o.push_back(Millis("flow.shutdown_timeout_ms",
                     "On SIGTERM/SIGINT, how long to wait for in-flight acks before exiting.",
                     &RelayConfig::shutdown_timeout));
  o.push_back(Millis("flow.reconnect_min_ms", "First reconnect delay after a failure (ms).",
                     &RelayConfig::reconnect_min));
  o.push_back(Millis("flow.reconnect_max_ms", "Cap of the exponential reconnect delay (ms).",
                     &RelayConfig::reconnect_max));
  o.push_back(Millis("flow.standby_interval_ms",
                     "While another process reads the slot (the active relay of a pair), how "
                     "often this one tries to take it (+-20% jitter); it takes over within about "
                     "two intervals of the active one stopping, and says standby in /readyz.",
                     &RelayConfig::standby_interval));
  o.push_back(Millis("flow.kafka_wait_yield_ms",
                     "When the oldest unconfirmed transaction has had no acknowledgement from "
                     "Kafka for this long (Kafka unreachable from this relay), end the session, "
                     "let go of the slot and wait three standby intervals before trying it "
                     "again, so that the other relay of a pair, if it reaches Kafka, takes "
                     "over. What was not confirmed is published again by whichever relay "
                     "streams next. 0 = hold the slot and wait for Kafka however long.",
                     &RelayConfig::kafka_wait_yield));
  o.push_back(Millis("flow.heartbeat_interval_ms",
                     "Emit a heartbeat (non-transactional logical message, never published) "
                     "this often; it measures end-to-end lag and keeps an idle database's slot "
                     "moving. 0 = off.",
                     &RelayConfig::heartbeat_interval));
  o.push_back(Str("dead_letter.table",
                  "Table in the source database that receives events that can never be "
                  "published (with reason and LSN); created when missing.",
                  &RelayConfig::dead_letter_table));
  o.push_back(Bool("recovery.enabled",
                   "When the slot is lost (wal_status 'lost') or was dropped after streaming, "
                   "recreate it and republish from the outbox tables the rows of transactions "
                   "not known delivered at the recorded snapshot bound (duplicates possible, no "
                   "loss; needs at least one source table). Off: refuse to start.",
                   &RelayConfig::recovery_enabled));
  o.push_back(Str("recovery.progress_table",
                  "Table in the source database where the relay records its progress (a "
                  "snapshot bound per slot, for lost-slot recovery); created when missing.",
                  &RelayConfig::progress_table));
  o.push_back(Str("guard.warn",
                  "Retained WAL of the slot that logs a warning and is exported as state "
                  "'warn': bytes (512MB, 2GB) or a fraction of max_slot_wal_keep_size (0.5).",
                  &RelayConfig::guard_warn));
  o.push_back(Str("guard.critical",
                  "Retained WAL that makes the state 'critical' (and /readyz fail); same forms "
                  "as guard.warn.",
                  &RelayConfig::guard_critical));
  o.push_back(Millis("guard.interval_ms", "How often the slot guard polls pg_replication_slots.",
                     &RelayConfig::guard_interval));
  o.push_back(Str("ops.metrics_address",
                  "host:port serving /metrics (Prometheus), /healthz and /readyz (GET and "
                  "HEAD only); :port listens on 127.0.0.1, 0.0.0.0:port on every interface; "
                  "empty = off.",
                  &RelayConfig::metrics_address));
  o.push_back(Str("ops.log_level", "trace, debug, info, warn, error.", &RelayConfig::log_level));
  o.push_back(Str("ops.log_format",
                  "text (time with its UTC offset, level, message) or json (one object per "
                  "line: time, level, message) for log shippers.",
                  &RelayConfig::log_format));
  return o;
}

std::string ToRaw(const toml::node& n) {
  if (auto s = n.value<std::string>()) return *s;
  if (auto b = n.value_exact<bool>()) return *b ? "true" : "false";
  if (auto i = n.value_exact<int64_t>()) return std::to_string(*i);
  if (auto d = n.value_exact<double>()) {
    std::ostringstream os;
    os << *d;
    return os.str();
  }
  return "<unsupported TOML value>";
}

}  // namespace

std::string OptionSpec::Flag() const {
  std::string f = "--" + key;
  for (char& ch : f) {
    if (ch == '.' || ch == '_') ch = '-';
  }
  // Lists and maps take one element per flag: singular names read better.
  if (kind == OptionKind::kList || kind == OptionKind::kMap) {
    if (f.ends_with("ies")) {
      f = f.substr(0, f.size() - 3) + "y";
    } else if (f.ends_with("s")) {
      f.pop_back();
    }
  }
  return f;
}

std::string OptionSpec::EnvVar() const {
  std::string e = "WALRELAY_" + key;
  for (char& ch : e) {
    if (ch == '.') ch = '_';
    ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  }
  return e;
}

const std::vector<OptionSpec>& RunOptions() {
  static const std::vector<OptionSpec> options = BuildRunOptions();
  return options;
}

Status LoadTomlFile(const std::string& path,
                    std::vector<std::pair<const OptionSpec*, std::vector<std::string>>>* values) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& err) {  // toml++ is built with exceptions on Debian
    std::ostringstream os;
    os << path << ":" << err.source().begin.line << ":" << err.source().begin.column << ": "
       << err.description();
    return InvalidArgumentError("config file: " + os.str());
  }
  // Every key in the file must name an option: walk sections and their keys.
  for (const auto& [section, node] : root) {
    const toml::table* tbl = node.as_table();
    if (tbl == nullptr) {
      return InvalidArgumentError("config file " + path + ": top-level key '" +
                                  std::string(section.str()) +
                                  "' is not a section; options live in [source], [outbox], "
                                  "[kafka], [flow], [dead_letter], [ops]");
    }
    for (const auto& [name, value] : *tbl) {
      std::string key = std::string(section.str()) + "." + std::string(name.str());
      const OptionSpec* spec = nullptr;
      for (const auto& s : RunOptions()) {
        if (s.key == key) spec = &s;
      }
      if (spec == nullptr && key == "recovery.lookback_ms") {
        return InvalidArgumentError(
            "config file " + path +
            ": option 'recovery.lookback_ms' was removed: lost-slot recovery is now bounded by "
            "a recorded snapshot and needs no look-back (docs/operations.md, section 2); "
            "delete the line");
      }
      if (spec == nullptr) {
        std::vector<std::string> keys;
        for (const auto& s : RunOptions()) keys.push_back(s.key);
        return InvalidArgumentError("config file " + path + ": unknown option '" + key + "'" +
                                    DidYouMean(key, keys) + " (see `walrelay run --help`)");
      }
      std::vector<std::string> raw;
      if (spec->kind == OptionKind::kList) {
        const toml::array* arr = value.as_array();
        if (arr == nullptr) {
          return InvalidArgumentError("config file " + path + ": '" + key + "' must be an array");
        }
        for (const auto& el : *arr) raw.push_back(ToRaw(el));
      } else if (spec->kind == OptionKind::kMap) {
        const toml::table* t = value.as_table();
        if (t == nullptr) {
          return InvalidArgumentError("config file " + path + ": '" + key + "' must be a table");
        }
        // Dotted names: `linger.ms = 5` is a nested table in TOML; flatten it back, so
        // quoted ("linger.ms" = 5) and unquoted names mean the same.
        std::function<void(const toml::table&, const std::string&)> flatten =
            [&](const toml::table& table, const std::string& prefix) {
              for (const auto& [k, v] : table) {
                const std::string name = prefix + std::string(k.str());
                if (const toml::table* inner = v.as_table()) {
                  flatten(*inner, name + ".");
                } else {
                  raw.push_back(name + "=" + ToRaw(v));
                }
              }
            };
        flatten(*t, "");
      } else {
        if (value.is_array() || value.is_table()) {
          return InvalidArgumentError("config file " + path + ": '" + key +
                                      "' must be a single value");
        }
        raw.push_back(ToRaw(value));
      }
      values->emplace_back(spec, std::move(raw));
    }
  }
  return Status::Ok();
}

const std::vector<std::string_view>& OtherWalrelayVariables() {
  static const std::vector<std::string_view> names = {
      // walrelay and walrelay-ledger
      "WALRELAY_CONFIG",                // --config (run and every command that takes its options)
      "WALRELAY_RELAY_FAILPOINT",       // test builds: src/relay/core/pipeline.cc
      "WALRELAY_INBOX_FAILPOINT",       // test builds: src/inbox/consumer_group.cc
      "WALRELAY_LEDGER_PASSWORD_FILE",  // walrelay-ledger --password-file
      // scripts/ and bench/
      "WALRELAY_CACHE_DIR", "WALRELAY_KAFKA_OWNER", "WALRELAY_KAFKA_START_TIMEOUT",
      "WALRELAY_PG_CACHE", "WALRELAY_PRELOAD", "WALRELAY_BINARY",
      // the test harness (tests/support), whose relays inherit its environment
      "WALRELAY_TEST_KAFKA", "WALRELAY_TEST_BROKER", "WALRELAY_PG_BINDIR",
      "WALRELAY_NEEDS_DEV_BROKER", "WALRELAY_DEVBROKER_PATH", "WALRELAY_LEDGER_BINARY",
      "WALRELAY_LEDGER_PATH", "WALRELAY_WRITE_CORPUS", "WALRELAY_WRITE_GOLDEN",
      "WALRELAY_GOLDEN_DIR", "WALRELAY_SOURCE_DIR"};
  return names;
}

namespace {

// The variables Kubernetes puts into every pod for each Service of the namespace (service
// links): a Service named walrelay or walrelay-metrics gives WALRELAY_SERVICE_HOST,
// WALRELAY_METRICS_SERVICE_PORT_HTTP, WALRELAY_PORT, WALRELAY_PORT_9187_TCP_ADDR, ...
bool KubernetesServiceLink(std::string_view name) {
  if (name.find("_SERVICE_HOST") != std::string_view::npos ||
      name.find("_SERVICE_PORT") != std::string_view::npos) {
    return true;
  }
  const size_t port = name.rfind("_PORT");
  if (port == std::string_view::npos) return false;
  const std::string_view rest = name.substr(port + 5);  // "", "_9187_TCP", "_9187_TCP_ADDR"
  if (rest.empty()) return true;
  return rest.size() > 1 && rest[0] == '_' && std::isdigit(static_cast<unsigned char>(rest[1]));
}

}  // namespace

Status CheckWalrelayEnvironment(const std::vector<std::string_view>& environment) {
  std::vector<std::string> known;
  for (const auto& s : RunOptions()) known.push_back(s.EnvVar());
  for (std::string_view v : OtherWalrelayVariables()) known.emplace_back(v);
  for (std::string_view entry : environment) {
    const std::string_view name = entry.substr(0, entry.find('='));
    if (!name.starts_with("WALRELAY_")) continue;
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    if (KubernetesServiceLink(name)) continue;
    return InvalidArgumentError(
        "environment variable " + std::string(name) + " is not a walrelay option" +
        DidYouMean(name, known) +
        " (refused: the setting it was meant to change would silently keep its default). "
        "Fix: correct or unset it; `walrelay config-reference` lists every variable");
  }
  return Status::Ok();
}

std::string ConfigurationReference() {
  relay::RelayConfig defaults;
  std::ostringstream os;
  os << "# walrelay run: configuration reference\n\n"
     << "Generated from the option registry (`walrelay config-reference`); a test keeps this\n"
     << "file equal to the code. Precedence: flag > environment variable > TOML file >\n"
     << "default. A TOML key `section.name` lives in `[section]` as `name = ...`.\n"
     << "An unknown TOML key, flag or command, and a `WALRELAY_*` environment variable that\n"
     << "is not in this table (nor `WALRELAY_CONFIG`, the harness's variables listed in\n"
     << "src/cli/options.cc, or Kubernetes' service links such as `WALRELAY_SERVICE_HOST`),\n"
     << "are refused with the closest name (exit 2).\n\n"
     << "| TOML key | flag | environment | default | meaning |\n"
     << "|---|---|---|---|---|\n";
  for (const auto& s : RunOptions()) {
    os << "| `" << s.key << "` | `" << s.Flag() << "` | `" << s.EnvVar() << "` | "
       << s.show(defaults) << " | " << s.help << " |\n";
  }
  return os.str();
}

std::string RedactConninfo(std::string_view conninfo) {
  // Parsed by libpq itself, so every form it accepts (keyword/value, URI with the password
  // in the authority or the query, percent-encoding, quoting) is redacted alike; what it
  // cannot parse is not shown at all.
  if (conninfo.empty()) {
    std::string env;
    for (const char* name : {"PGSERVICE", "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE",
                             "PGUSER", "PGSSLMODE"}) {
      if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
        env += std::string(env.empty() ? "" : " ") + name + "=" + v;
      }
    }
    return "libpq's environment and defaults" + (env.empty() ? "" : " (" + env + ")");
  }
  char* err = nullptr;
  const std::string text(conninfo);
  PQconninfoOption* opts = PQconninfoParse(text.c_str(), &err);
  if (opts == nullptr) {
    if (err != nullptr) PQfreemem(err);
    return "<connection string that libpq cannot parse, not shown>";
  }
  std::string out;
  for (const PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const std::string_view key(o->keyword);
    std::string value = key == "password" || key == "sslpassword" ? "********" : o->val;
    if (value.empty() || value.find_first_of(" '\\") != std::string::npos) {
      std::string quoted = "'";
      for (char c : value) {
        if (c == '\'' || c == '\\') quoted += '\\';
        quoted += c;
      }
      value = quoted + "'";
    }
    if (!out.empty()) out += ' ';
    out += std::string(key) + "=" + value;
  }
  PQconninfoFree(opts);
  return out;
}

namespace {

// The --help section of an option: its TOML section, titled. A subcommand's own options
// stay in CLI11's default group, which it prints first.
std::string HelpGroup(std::string_view key) {
  const std::string_view section = key.substr(0, key.find('.'));
  static const std::pair<std::string_view, std::string_view> kTitles[] = {
      {"source", "Source (PostgreSQL) [source.*]"},
      {"outbox", "Outbox tables and their mapping to records [outbox.*]"},
      {"kafka", "Kafka [kafka.*]"},
      {"flow", "Flow control and batching [flow.*]"},
      {"guard", "Slot guard: retained WAL [guard.*]"},
      {"recovery", "Lost-slot recovery [recovery.*]"},
      {"poll", "Poll mode, --source-mode poll [poll.*]"},
      {"dead_letter", "Dead letters [dead_letter.*]"},
      {"ops", "Operations: metrics, health, logs [ops.*]"},
  };
  for (const auto& [name, title] : kTitles) {
    if (name == section) return std::string(title);
  }
  return std::string(section) + " [" + std::string(section) + ".*]";
}

}  // namespace

RunOptionBinder::RunOptionBinder(CLI::App* app) {
  app->add_option("-c,--config", config_path_, "TOML configuration file")
      ->envname("WALRELAY_CONFIG");
  bound_.reserve(RunOptions().size());
  for (const auto& spec : RunOptions()) {
    bound_.push_back(Bound{&spec, nullptr, {}});
    Bound& b = bound_.back();
    std::string help = spec.help;
    if (!spec.secret) help += " [default: " + spec.show(relay::RelayConfig{}) + "]";
    CLI::Option* opt = app->add_option(spec.Flag(), b.values, help)
                           ->envname(spec.EnvVar())
                           ->group(HelpGroup(spec.key));
    if (spec.kind == OptionKind::kList || spec.kind == OptionKind::kMap) {
      // Lists split on commas; map entries do not (a librdkafka value may hold commas).
      if (spec.kind == OptionKind::kList) opt->delimiter(',');
      opt->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
      opt->type_name(spec.kind == OptionKind::kMap ? "NAME=VALUE" : "VALUE");
    } else {
      opt->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      opt->type_name(spec.kind == OptionKind::kInt    ? "INT"
                     : spec.kind == OptionKind::kBool ? "BOOL"
                                                      : "TEXT");
    }
    b.option = opt;
  }
}

Result<relay::RelayConfig> RunOptionBinder::Resolve(bool require_kafka) const {
  relay::RelayConfig config;
  std::vector<std::pair<const OptionSpec*, std::vector<std::string>>> file_values;
  if (!config_path_.empty()) WALRELAY_RETURN_IF_ERROR(LoadTomlFile(config_path_, &file_values));
  // The profile sets defaults, so it applies first (flag > environment > file), and the
  // other options, from wherever they come, override what it set.
  auto is_profile = [](const OptionSpec* spec) { return spec->key == "outbox.profile"; };
  WALRELAY_RETURN_IF_ERROR(relay::ApplyOutboxProfile(default_profile_, &config));
  for (int pass = 0; pass < 2; ++pass) {
    const bool profile_pass = pass == 0;
    // File first, so flags and environment (already merged by CLI11) override it.
    for (const auto& [spec, raw] : file_values) {
      if (is_profile(spec) != profile_pass) continue;
      bool on_command_line = false;
      for (const auto& b : bound_) {
        if (b.spec == spec && b.option->count() > 0) on_command_line = true;
      }
      if (on_command_line || raw.empty()) continue;
      WALRELAY_RETURN_IF_ERROR(spec->apply(config, raw).WithContext("config file " + config_path_));
    }
    for (const auto& b : bound_) {
      if (is_profile(b.spec) != profile_pass) continue;
      if (b.option->count() == 0 || b.values.empty()) continue;
      WALRELAY_RETURN_IF_ERROR(b.spec->apply(config, b.values));
    }
  }
  if (!require_kafka && config.bootstrap_servers.empty()) config.embedded_kafka = true;
  WALRELAY_RETURN_IF_ERROR(config.Validate());
  return config;
}

}  // namespace walrelay::cli
