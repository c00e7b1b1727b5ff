#include "src/cli/from_debezium.h"

#include <simdjson.h>

#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "base/json.h"

namespace walrelay::cli {
namespace {

constexpr std::string_view kPostgresConnector = "io.debezium.connector.postgresql.PostgresConnector";
constexpr std::string_view kEventRouter = "io.debezium.transforms.outbox.EventRouter";

using Settings = std::vector<std::pair<std::string, std::string>>;  // input order

std::string Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

std::vector<std::string> SplitList(std::string_view s) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in{std::string(s)};
  while (std::getline(in, item, ',')) {
    if (std::string t = Trim(item); !t.empty()) out.push_back(std::move(t));
  }
  return out;
}

// A Java .properties file, the forms connector configurations use: key=value or
// key: value, # and ! comments. (Line continuations and escapes are not used by them.)
Result<Settings> ParseProperties(std::string_view text) {
  Settings out;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == '!') continue;
    const size_t sep = t.find_first_of("=:");
    if (sep == std::string::npos) {
      return InvalidArgumentError("line " + std::to_string(n) +
                                  " is not key=value (a .properties file was expected)");
    }
    out.emplace_back(Trim(t.substr(0, sep)), Trim(t.substr(sep + 1)));
  }
  return out;
}

// Kafka Connect's REST form, {"name": ..., "config": {...}}, or the bare config object.
Result<Settings> ParseJson(std::string_view text) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::element doc;
  if (auto error = parser.parse(padded).get(doc); error) {
    return InvalidArgumentError(std::string("not valid JSON: ") + simdjson::error_message(error));
  }
  simdjson::dom::object object;
  if (doc.get_object().get(object)) return InvalidArgumentError("the JSON is not an object");
  simdjson::dom::object config;
  if (!object["config"].get_object().get(config)) object = config;
  Settings out;
  for (auto field : object) {
    std::string value;
    std::string_view s;
    if (!field.value.get_string().get(s)) {
      value = std::string(s);
    } else if (field.value.is_null()) {
      continue;
    } else {
      value = simdjson::minify(field.value);  // numbers and booleans as written
    }
    out.emplace_back(std::string(field.key), std::move(value));
  }
  return out;
}

size_t Indent(const std::string& line) { return line.find_first_not_of(' '); }

// A YAML scalar as Strimzi's examples write them: plain, 'single' or "double" quoted, with
// an optional trailing comment. Block scalars (| >) are refused by the caller.
std::string YamlScalar(std::string v) {
  v = Trim(v);
  if (!v.empty() && (v[0] == '"' || v[0] == '\'')) {
    const char q = v[0];
    std::string out;
    for (size_t i = 1; i < v.size(); ++i) {
      if (q == '\'' && v[i] == '\'' && i + 1 < v.size() && v[i + 1] == '\'') {
        out += '\'';
        ++i;
      } else if (q == '"' && v[i] == '\\' && i + 1 < v.size()) {
        out += v[++i];
      } else if (v[i] == q) {
        break;
      } else {
        out += v[i];
      }
    }
    return out;
  }
  if (const size_t hash = v.find(" #"); hash != std::string::npos) v = Trim(v.substr(0, hash));
  return v;
}

// Strimzi's KafkaConnector: spec.class and the flat map spec.config.
Result<Settings> ParseKafkaConnectorYaml(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (Trim(line).empty() || Trim(line)[0] == '#') continue;
    if (line.find('\t') != std::string::npos) {
      return InvalidArgumentError("the YAML is indented with tabs");
    }
    lines.push_back(line);
  }
  Settings out;
  size_t spec = std::string::npos, spec_indent = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (Indent(lines[i]) == 0 && Trim(lines[i]) == "spec:") spec = i;
  }
  if (spec == std::string::npos) return InvalidArgumentError("the KafkaConnector has no spec");
  size_t i = spec + 1;
  if (i < lines.size()) spec_indent = Indent(lines[i]);
  for (; i < lines.size() && Indent(lines[i]) >= spec_indent && spec_indent > 0; ++i) {
    if (Indent(lines[i]) != spec_indent) continue;
    const std::string t = Trim(lines[i]);
    if (t.rfind("class:", 0) == 0) {
      out.emplace_back("connector.class", YamlScalar(t.substr(6)));
    } else if (t == "config:") {
      const size_t at = i + 1;
      const size_t config_indent = at < lines.size() ? Indent(lines[at]) : 0;
      for (i = at; i < lines.size() && Indent(lines[i]) == config_indent &&
                   config_indent > spec_indent;
           ++i) {
        const std::string kv = Trim(lines[i]);
        const size_t colon = kv.find(": ") != std::string::npos ? kv.find(": ") : kv.find(':');
        if (colon == std::string::npos) {
          return InvalidArgumentError("spec.config line '" + kv + "' is not key: value");
        }
        const std::string value = Trim(kv.substr(colon + 1));
        if (value.rfind('|', 0) == 0 || value.rfind('>', 0) == 0) {
          return InvalidArgumentError("spec.config." + kv.substr(0, colon) +
                                      " is a block scalar, which is not read: write it on one line");
        }
        out.emplace_back(YamlScalar(kv.substr(0, colon)), YamlScalar(value));
      }
      --i;
    }
  }
  return out;
}

// ${provider:path:key}: Kafka Connect's config providers (Strimzi's secrets, files, env).
bool IsProviderReference(std::string_view v) {
  const size_t at = v.find("${");
  return at != std::string_view::npos && v.find(':', at) != std::string_view::npos &&
         v.find('}', at) != std::string_view::npos && v.find("${routedByValue}") == std::string_view::npos;
}

bool IsSecret(std::string_view key) {
  return key.find("password") != std::string_view::npos ||
         key.find("secret") != std::string_view::npos ||
         key.find("jaas") != std::string_view::npos;
}

std::string Quoted(std::string_view s) {
  std::string out;
  AppendJsonQuoted(&out, s);  // a JSON string literal is a TOML basic string
  return out;
}

// What becomes of the settings: TOML lines per section, and the unmapped ones.
struct Output {
  std::map<std::string, std::vector<std::string>> sections;  // "source" -> lines
  std::vector<std::string> order = {"source", "outbox", "outbox.columns", "outbox.headers",
                                    "kafka", "kafka.properties", "flow"};
  std::vector<std::string> unmapped;
  std::vector<std::string> comments;  // for the head of the file

  void Set(const std::string& section, const std::string& key, const std::string& toml_value,
           const std::string& comment = "") {
    sections[section].push_back(key + " = " + toml_value +
                                (comment.empty() ? "" : "  # " + comment));
  }
  void NotMapped(const std::string& key, const std::string& shown_value,
                 const std::string& reason) {
    unmapped.push_back(key + ": " + reason);
    comments.push_back("# not mapped: " + key + (shown_value.empty() ? "" : " = " + shown_value) +
                       ": " + reason);
  }
};

// The converters' forms (docs/migrating-from-debezium.md, "Converters").
std::string FormatFor(const std::string& converter, const std::string& schemas_enable,
                      std::string* why_not) {
  if (converter.empty()) {
    return schemas_enable == "false" ? "json-string" : "connect-json";  // Kafka's default
  }
  if (converter.ends_with(".StringConverter")) return "raw";
  if (converter.ends_with(".JsonConverter")) {
    return schemas_enable == "false" ? "json-string" : "connect-json";
  }
  if (converter.ends_with(".ByteArrayConverter")) return "raw";
  *why_not = "converter " + converter +
             " has no walrelay form (raw, json-string, connect-json); Avro and Protobuf with a "
             "schema registry are not reproduced";
  return "";
}

}  // namespace

Result<DebeziumTranslation> TranslateDebeziumConfig(std::string_view text) {
  const std::string trimmed = Trim(text.substr(0, std::min<size_t>(text.size(), 4096)));
  const bool yaml = trimmed.find("kind: KafkaConnector") != std::string::npos;
  if (!yaml && trimmed.rfind("apiVersion:", 0) == 0) {
    return InvalidArgumentError("a Kubernetes resource that is not a KafkaConnector");
  }
  Result<Settings> parsed = yaml                                       ? ParseKafkaConnectorYaml(text)
                            : !trimmed.empty() && trimmed[0] == '{' ? ParseJson(text)
                                                                     : ParseProperties(text);
  if (!parsed.ok()) return parsed.status();
  std::map<std::string, std::string> all(parsed->begin(), parsed->end());
  auto get = [&](const std::string& key) {
    auto it = all.find(key);
    return it == all.end() ? std::string() : it->second;
  };
  const std::string connector = get("connector.class");
  if (connector != kPostgresConnector) {
    return InvalidArgumentError(
        "connector.class is '" + connector + "', not " + std::string(kPostgresConnector) +
        ": walrelay replaces Debezium's PostgreSQL connector only");
  }

  // The Outbox Event Router among the transforms, by its type.
  std::string router;
  for (const std::string& name : SplitList(get("transforms"))) {
    if (get("transforms." + name + ".type") == kEventRouter) router = name;
  }

  Output out;
  std::set<std::string> used = {"connector.class", "name"};
  auto use = [&](const std::string& key) {
    used.insert(key);
    return get(key);
  };

  // --- source: the DSN from the database.* settings (never the password).
  std::string dsn;
  for (const auto& [key, word] : std::vector<std::pair<std::string, std::string>>{
           {"database.hostname", "host"},
           {"database.port", "port"},
           {"database.dbname", "dbname"},
           {"database.user", "user"},
           {"database.sslmode", "sslmode"},
           {"database.sslrootcert", "sslrootcert"},
           {"database.sslcert", "sslcert"},
           {"database.sslkey", "sslkey"}}) {
    if (std::string v = use(key); IsProviderReference(v)) {
      out.NotMapped(key, v,
                    "a Kafka Connect config provider reference, which walrelay does not "
                    "resolve: put the value itself in source.dsn");
    } else if (!v.empty()) {
      dsn += (dsn.empty() ? "" : " ") + word + "=" +
             (v.find_first_of(" '\\") == std::string::npos ? v : "'" + v + "'");
    }
  }
  if (!dsn.empty()) out.Set("source", "dsn", Quoted(dsn));
  if (all.count("database.password")) {
    used.insert("database.password");
    out.comments.push_back(
        "# database.password is not copied: give walrelay the password in "
        "source.password_file (owner-only), PGPASSWORD or ~/.pgpass");
  }
  if (std::string v = use("slot.name"); !v.empty()) {
    out.Set("source", "slot", Quoted(v));
  } else {
    out.Set("source", "slot", Quoted("debezium"), "Debezium's default slot.name");
  }
  if (std::string v = use("publication.name"); !v.empty()) {
    out.Set("source", "publication", Quoted(v));
  } else {
    out.Set("source", "publication", Quoted("dbz_publication"), "Debezium's default");
  }
  if (std::string v = use("plugin.name"); !v.empty()) {
    if (v == "pgoutput" || v == "wal2json") {
      out.Set("source", "plugin", Quoted(v));
    } else {
      out.NotMapped("plugin.name", v,
                    "walrelay reads pgoutput and wal2json slots only; a " + v +
                        " slot cannot be taken over (start walrelay on a new pgoutput slot "
                        "with `walrelay republish --create-slot`)");
    }
  }
  if (std::string v = use("table.include.list"); !v.empty()) {
    std::string list;
    for (const std::string& t : SplitList(v)) {
      // Debezium's entries are regular expressions; a plain schema.table is one too.
      if (t.find_first_of("*+?[](){}|^$\\") != std::string::npos) {
        out.NotMapped("table.include.list", t,
                      "a regular expression: walrelay names its outbox tables exactly "
                      "(source.tables)");
        continue;
      }
      list += (list.empty() ? "" : ", ") + Quoted(t);
    }
    if (!list.empty()) out.Set("source", "tables", "[" + list + "]");
  }
  if (std::string v = use("heartbeat.interval.ms"); !v.empty()) {
    out.Set("flow", "heartbeat_interval_ms", v,
            "a logical message: no heartbeat table or heartbeat.action.query needed");
  }
  if (all.count("heartbeat.action.query")) {
    used.insert("heartbeat.action.query");
    out.comments.push_back(
        "# heartbeat.action.query is not needed: walrelay's heartbeat is a logical message "
        "(flow.heartbeat_interval_ms)");
  }
  if (std::string v = use("snapshot.mode"); !v.empty() && v != "never" && v != "no_data") {
    out.NotMapped("snapshot.mode", v,
                  "walrelay never snapshots; rows already in the outbox are published with "
                  "`walrelay republish` when needed");
  }

  // --- the record: the profile, the router's settings, the converters.
  out.Set("outbox", "profile", Quoted("debezium"),
          "the connector's and router's defaults (docs/migrating-from-debezium.md)");
  {
    std::string why_not;
    const std::string key_format =
        FormatFor(use("key.converter"), use("key.converter.schemas.enable"), &why_not);
    if (!key_format.empty()) {
      out.Set("outbox", "key_format", Quoted(key_format));
    } else {
      out.NotMapped("key.converter", get("key.converter"), why_not);
    }
    why_not.clear();
    const std::string value_format =
        FormatFor(use("value.converter"), use("value.converter.schemas.enable"), &why_not);
    const std::string expand =
        router.empty() ? "" : get("transforms." + router + ".table.expand.json.payload");
    if (expand == "true") {
      used.insert("transforms." + router + ".table.expand.json.payload");
      out.Set("outbox", "value_format", Quoted("json-compact"),
              "table.expand.json.payload: the router prints numbers the Java way (152.50 "
              "becomes 152.5); the JSON values are equal");
    } else if (!value_format.empty()) {
      out.Set("outbox", "value_format", Quoted(value_format));
    } else {
      out.NotMapped("value.converter", get("value.converter"), why_not);
    }
  }
  if (router.empty()) {
    out.comments.push_back(
        "# no Outbox Event Router (" + std::string(kEventRouter) +
        ") among the transforms: the debezium profile's router defaults are assumed");
  } else {
    used.insert("transforms");
    used.insert("transforms." + router + ".type");
    const std::string p = "transforms." + router + ".";
    std::string event_type_column = "type";  // the profile's
    if (std::string v = use(p + "table.field.event.id"); !v.empty()) {
      out.Set("outbox.columns", "event_id", Quoted(v));
    }
    if (std::string v = use(p + "table.field.event.key"); !v.empty()) {
      out.Set("outbox.columns", "aggregate_id", Quoted(v));
    }
    if (std::string v = use(p + "table.field.event.payload"); !v.empty()) {
      out.Set("outbox.columns", "payload", Quoted(v));
    }
    if (std::string v = use(p + "table.field.event.type"); !v.empty()) {
      event_type_column = v;
      out.Set("outbox.columns", "event_type", Quoted(v));
    }
    if (std::string v = use(p + "route.by.field"); !v.empty()) {
      out.Set("outbox.columns", "aggregate_type", Quoted(v));
    }
    if (std::string v = use(p + "route.topic.replacement"); !v.empty()) {
      std::string t = v;
      for (size_t at; (at = t.find("${routedByValue}")) != std::string::npos;) {
        t.replace(at, 16, "${aggregate_type}");
      }
      out.Set("outbox", "topic_template", Quoted(t));
    }
    used.insert(p + "table.expand.json.payload");  // false, or mapped with the value format
    if (std::string v = use(p + "table.fields.additional.placement"); !v.empty()) {
      for (const std::string& entry : SplitList(v)) {
        // column:placement[:alias]
        std::vector<std::string> parts;
        std::istringstream in(entry);
        for (std::string part; std::getline(in, part, ':');) parts.push_back(Trim(part));
        if (parts.size() >= 2 && parts[1] == "header" && parts[0] == event_type_column) {
          out.Set("outbox.headers", "event_type", Quoted(parts.size() >= 3 ? parts[2] : parts[0]));
        } else {
          out.NotMapped(p + "table.fields.additional.placement", entry,
                        "walrelay writes the event type column as a header (event_type), and "
                        "other fields in the outbox table's headers column; other columns and "
                        "envelope placement are not reproduced");
        }
      }
    }
    for (const auto& [key, value] : *parsed) {
      if (key.rfind(p, 0) != 0 || used.count(key)) continue;
      used.insert(key);
      out.NotMapped(key, IsSecret(key) ? "********" : value,
                    key == p + "table.field.event.timestamp"
                        ? "walrelay's record timestamp is the commit time "
                          "(kafka.record_timestamp = \"commit\") or the produce time"
                        : "no walrelay equivalent of this router setting");
    }
  }

  // --- Kafka: the producer's overrides with librdkafka's names where they are the same.
  static const std::set<std::string> kSameName = {
      "compression.type", "linger.ms", "batch.size", "acks", "enable.idempotence",
      "client.id", "security.protocol", "sasl.mechanism", "ssl.ca.location",
      "ssl.certificate.location", "ssl.key.location", "ssl.endpoint.identification.algorithm"};
  for (const auto& [key, value] : *parsed) {
    for (std::string_view prefix : {"producer.override.", "producer."}) {
      if (key.rfind(prefix, 0) != 0 || used.count(key)) continue;
      used.insert(key);
      const std::string name = key.substr(prefix.size());
      if (name == "acks" || name == "enable.idempotence") {
        out.comments.push_back("# " + key + " is not needed: walrelay always produces "
                               "idempotently with acks=all");
      } else if (kSameName.count(name) && !IsSecret(name)) {
        out.Set("kafka.properties", Quoted(name), Quoted(value));
      } else {
        out.NotMapped(key, IsSecret(key) ? "********" : value,
                      IsSecret(key) ? "a secret: put its librdkafka form in kafka.properties_file"
                                    : "a Java producer setting; set its librdkafka equivalent in "
                                      "kafka.properties if it has one (CONFIGURATION.md)");
      }
    }
  }
  out.comments.push_back(
      "# kafka.bootstrap_servers: the Kafka Connect worker's bootstrap.servers (not part of "
      "the connector's configuration)");

  // KIP-618: a connector that requires exactly-once delivery (on a worker with
  // exactly.once.source.support=enabled) gets walrelay's exactly-once mode, whose Kafka
  // transactions follow source transactions rather than Connect's poll batches.
  if (std::string v = use("exactly.once.support"); v == "required") {
    out.Set("kafka", "exactly_once", "true");
    out.comments.push_back(
        "# exactly.once.support=required: kafka.exactly_once = true; run `walrelay setup` "
        "with this file to create the checkpoint topic, and grant the TransactionalId ACLs "
        "(docs/operations.md, section 17)");
  } else if (!v.empty()) {
    out.comments.push_back("# exactly.once.support=" + v +
                           ": walrelay's default mode (at least once; set kafka.exactly_once "
                           "= true for exactly once)");
  }
  if (std::string v = use("transaction.boundary"); !v.empty()) {
    out.comments.push_back("# transaction.boundary=" + v +
                           ": walrelay's Kafka transactions always hold whole source "
                           "transactions (kafka.transaction_interval_ms coalesces them)");
  }

  if (std::string v = use("publication.autocreate.mode"); !v.empty()) {
    out.comments.push_back("# publication.autocreate.mode: `walrelay setup` creates the "
                           "publication (source.publication) for source.tables");
  }
  if (all.count("key.converter") == 0 || all.count("value.converter") == 0) {
    out.comments.push_back(
        "# a converter the connector does not set is the Connect worker's: Kafka's default "
        "JsonConverter with schemas is assumed (connect-json); check the worker's "
        "key.converter and value.converter");
  }

  // Everything else: said, never dropped.
  static const std::set<std::string> kHarmless = {
      "tasks.max", "topic.prefix", "database.server.name", "key.converter.schemas.enable",
      "value.converter.schemas.enable", "tombstones.on.delete", "include.schema.changes"};
  for (const auto& [key, value] : *parsed) {
    if (used.count(key)) continue;
    if (kHarmless.count(key)) {
      out.comments.push_back("# " + key + ": nothing to set in walrelay");
      continue;
    }
    out.NotMapped(key, IsSecret(key) ? "********" : value, "no walrelay equivalent");
  }

  DebeziumTranslation t;
  t.toml =
      "# walrelay configuration translated from a Debezium PostgreSQL connector "
      "(walrelay config from-debezium).\n# Check it, then: walrelay cutover debezium --config "
      "THIS_FILE --dry-run (docs/migrating-from-debezium.md)\n";
  for (const std::string& c : out.comments) t.toml += c + "\n";
  for (const std::string& section : out.order) {
    auto it = out.sections.find(section);
    if (it == out.sections.end()) continue;
    t.toml += "\n[" + section + "]\n";
    for (const std::string& line : it->second) t.toml += line + "\n";
  }
  t.unmapped = std::move(out.unmapped);
  return t;
}

}  // namespace walrelay::cli
