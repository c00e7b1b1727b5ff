#include "src/relay/core/outbox_mapper.h"

#include <algorithm>
#include <cstdio>

#include "base/headers.h"
#include "base/json.h"
#include "base/sql.h"

namespace walrelay::relay {
namespace {

constexpr pgoutput::Oid kByteaOid = 17;  // pg_type.oid of bytea (fixed in pg_type.dat)

int FindColumn(const pgoutput::Relation& relation, const std::string& name) {
  if (name.empty()) return -1;
  for (size_t i = 0; i < relation.columns.size(); ++i) {
    if (relation.columns[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

// Header names the relay writes itself (the configured event id, event type, aggregate
// type and position names) and the walrelay.* namespace, compared ignoring ASCII case: a
// second copy from row data would let a consumer that reads the last (or any) header see
// a spoofed value.
bool HasPrefixIgnoringCase(std::string_view name, std::string_view prefix) {
  return name.size() >= prefix.size() &&
         headers::SameNameIgnoringCase(name.substr(0, prefix.size()), prefix);
}

// A name walrelay writes itself: the contract's (as configured), anything under
// walrelay., and with a CloudEvents format the binding's (ce_*, content-type).
bool ReservedHeaderName(const RelayConfig& config, std::string_view name) {
  const HeaderNames& written = config.header_names;
  for (const std::string* w :
       {&written.event_id, &written.event_type, &written.aggregate_type, &written.position}) {
    if (!w->empty() && headers::SameNameIgnoringCase(name, *w)) return true;
  }
  if (config.record_format != RecordFormat::kWalrelay &&
      (HasPrefixIgnoringCase(name, headers::kCloudEventsPrefix) ||
       headers::SameNameIgnoringCase(name, headers::kContentType))) {
    return true;
  }
  return HasPrefixIgnoringCase(name, headers::kReservedPrefix);
}

}  // namespace

std::vector<OutboxTable> OutboxTablesByName(const std::vector<std::string>& configured) {
  std::vector<OutboxTable> tables;
  for (const std::string& t : configured) {
    auto name = ParseQualifiedName(t);
    if (!name.ok()) continue;
    tables.push_back({0, name->schema.empty() ? "public" : name->schema, name->name});
  }
  return tables;
}

OutboxMapper::OutboxMapper(const RelayConfig& config, std::vector<OutboxTable> tables,
                           bool match_by_oid)
    : config_(config),
      tables_(std::move(tables)),
      match_by_oid_(match_by_oid),
      topic_template_(CompileTopicTemplate(config.topic_template)) {}

std::vector<OutboxMapper::TemplatePart> OutboxMapper::CompileTopicTemplate(
    std::string_view tmpl) {
  std::vector<TemplatePart> parts;
  auto literal = [&parts](std::string_view text) {
    if (text.empty()) return;
    if (parts.empty() || parts.back().field != TemplateField::kLiteral) {
      parts.push_back({TemplateField::kLiteral, {}});
    }
    parts.back().text.append(text);
  };
  size_t i = 0;
  while (i < tmpl.size()) {
    const size_t open = tmpl.find("${", i);
    const size_t close = open == std::string_view::npos ? open : tmpl.find('}', open + 2);
    if (close == std::string_view::npos) {  // no (complete) placeholder left: text
      literal(tmpl.substr(i));
      break;
    }
    literal(tmpl.substr(i, open - i));
    const std::string_view name = tmpl.substr(open + 2, close - open - 2);
    const TemplateField field = name == "aggregate_type" ? TemplateField::kAggregateType
                                : name == "event_type"   ? TemplateField::kEventType
                                : name == "table"        ? TemplateField::kTable
                                                         : TemplateField::kLiteral;
    if (field == TemplateField::kLiteral) {
      literal(tmpl.substr(open, close - open + 1));  // an unknown placeholder stays as text
    } else {
      parts.push_back({field, std::string(name)});
    }
    i = close + 1;
  }
  return parts;
}

std::string_view OutboxMapper::ExpandTopicTemplate(std::string_view table,
                                                   const OutboxEvent& event) {
  std::string_view empty_placeholder;
  topic_buffer_.clear();
  for (const TemplatePart& part : topic_template_) {
    std::string_view value;
    switch (part.field) {
      case TemplateField::kLiteral:
        topic_buffer_.append(part.text);
        continue;
      case TemplateField::kAggregateType: value = event.aggregate_type; break;
      case TemplateField::kEventType: value = event.event_type; break;
      case TemplateField::kTable: value = table; break;
    }
    if (value.empty() && empty_placeholder.empty()) empty_placeholder = part.text;
    topic_buffer_.append(value);
  }
  return empty_placeholder;
}

void OutboxMapper::OnRelation(const pgoutput::Relation& relation) {
  Mapping m;
  m.table.reserve(relation.namespace_name.size() + 1 + relation.relation_name.size());
  m.table.append(relation.namespace_name).append(".").append(relation.relation_name);
  for (const auto& col : relation.columns) m.column_names.emplace_back(col.name);
  m.is_outbox = std::any_of(tables_.begin(), tables_.end(), [&](const OutboxTable& t) {
    return match_by_oid_ ? t.oid == relation.relation_id
                         : t.schema == relation.namespace_name && t.name == relation.relation_name;
  });
  const OutboxColumns& c = config_.columns;
  m.event_id = FindColumn(relation, c.event_id);
  m.aggregate_type = FindColumn(relation, c.aggregate_type);
  m.aggregate_id = FindColumn(relation, c.aggregate_id);
  m.topic = FindColumn(relation, c.topic);
  m.event_type = FindColumn(relation, c.event_type);
  m.payload = FindColumn(relation, c.payload);
  m.headers = FindColumn(relation, c.headers);
  m.payload_is_bytea = m.payload >= 0 && relation.columns[m.payload].type_oid == kByteaOid;
  for (auto [index, name] :
       {std::pair{m.event_id, &c.event_id}, std::pair{m.aggregate_id, &c.aggregate_id},
        std::pair{m.event_type, &c.event_type}, std::pair{m.payload, &c.payload}}) {
    if (index < 0) {
      m.missing = "table " + m.table + " has no column " + *name +
                  " (see --outbox-column to map column names)";
      break;
    }
  }
  relations_[relation.relation_id] = std::move(m);
}

bool OutboxMapper::IsOutbox(pgoutput::Oid relation_id) const {
  auto it = relations_.find(relation_id);
  return it != relations_.end() && it->second.is_outbox;
}

std::string_view OutboxMapper::TableName(pgoutput::Oid relation_id) const {
  auto it = relations_.find(relation_id);
  return it == relations_.end() ? std::string_view() : std::string_view(it->second.table);
}

void OutboxMapper::Reset(OutboxEvent* out) {
  owned_.clear();
  out->topic = out->key = out->value = out->event_id = out->event_type = out->aggregate_type = {};
  out->value_is_bytes = false;
  out->extra_headers.clear();
}

Status OutboxMapper::MapInsert(const pgoutput::Insert& insert, OutboxEvent* out) {
  auto it = relations_.find(insert.relation_id);
  if (it == relations_.end()) {
    return DataLossError("Insert for relation " + std::to_string(insert.relation_id) +
                         " before its Relation message");
  }
  const Mapping& m = it->second;
  if (!m.missing.empty()) {
    Reset(out);
    return InvalidArgumentError(m.missing);
  }
  insert.new_tuple.FillColumns(&columns_);  // MapRow resets *out

  // The text of column `index` (nullopt for NULL or an absent column); an error for a
  // value that is not text. The common case (a text column) is inline; the rest is not.
  Status first_error;
  auto other = [&](int index, const std::string& name) -> std::optional<std::string_view> {
    if (index < 0 || !first_error.ok()) return std::nullopt;
    if (static_cast<size_t>(index) >= columns_.size()) {
      first_error = InvalidArgumentError(
          "row of " + m.table + " has " + std::to_string(columns_.size()) +
          " columns, expected column " + name + " at position " + std::to_string(index + 1));
      return std::nullopt;
    }
    const pgoutput::ColumnKind kind = columns_[index].kind;
    if (kind != pgoutput::ColumnKind::kNull) {
      first_error = InvalidArgumentError("column " + name + " arrived " +
                                         (kind == pgoutput::ColumnKind::kBinary
                                              ? "in binary format (do not set binary 'true')"
                                              : "as unchanged TOAST, which an INSERT never sends"));
    }
    return std::nullopt;
  };
  auto text = [&](int index, const std::string& name) -> std::optional<std::string_view> {
    if (index >= 0 && static_cast<size_t>(index) < columns_.size() &&
        columns_[index].kind == pgoutput::ColumnKind::kText) [[likely]] {
      return columns_[index].data;
    }
    return other(index, name);
  };
  const OutboxColumns& c = config_.columns;
  OutboxRow row;
  row.event_id = text(m.event_id, c.event_id);
  row.aggregate_type = text(m.aggregate_type, c.aggregate_type);
  row.aggregate_id = text(m.aggregate_id, c.aggregate_id);
  row.topic = text(m.topic, c.topic);
  row.event_type = text(m.event_type, c.event_type);
  row.payload = text(m.payload, c.payload);
  row.headers = text(m.headers, c.headers);
  row.payload_is_bytea = m.payload_is_bytea;
  Status st = MapRow(m.table, row, out);
  return first_error.ok() ? st : first_error;
}

Status OutboxMapper::MapRow(std::string_view table, const OutboxRow& row, OutboxEvent* out) {
  Reset(out);
  const OutboxColumns& c = config_.columns;
  // Read every field before judging, so a dead letter carries all that could be read.
  Status first_error;
  auto take = [&first_error](const std::optional<std::string_view>& v, const std::string& name,
                             bool required, std::string_view* field) {
    *field = v.value_or(std::string_view());
    if (!v && required && first_error.ok()) {
      first_error = InvalidArgumentError("column " + name + " is NULL");
    }
  };
  take(row.event_id, c.event_id, true, &out->event_id);
  take(row.aggregate_id, c.aggregate_id, true, &out->key);
  take(row.event_type, c.event_type, true, &out->event_type);
  take(row.payload, c.payload, true, &out->value);
  take(row.aggregate_type, c.aggregate_type, false, &out->aggregate_type);
  if (!first_error.ok()) return first_error;
  if (row.payload_is_bytea) {
    std::string& bytes = owned_.emplace_back();
    if (Status st = DecodeByteaText(out->value, &bytes); !st.ok()) {
      return InvalidArgumentError("column " + c.payload + ": " + st.message());
    }
    out->value = bytes;
  }
  if (row.headers && !row.headers->empty()) {
    simdjson::dom::element doc;
    auto err = json_.parse(row.headers->data(), row.headers->size()).get(doc);
    if (err) {
      return InvalidArgumentError("column " + c.headers +
                                  " is not valid JSON: " + simdjson::error_message(err));
    }
    WALRELAY_RETURN_IF_ERROR(AddHeaders(doc, out));
  }
  return FinishEvent(table, row.topic.value_or(std::string_view()), !row.payload_is_bytea, out);
}

std::string OutboxMapper::RowAsJson(const pgoutput::Insert& insert) const {
  auto it = relations_.find(insert.relation_id);
  std::string out = "{";
  size_t i = 0;
  for (const pgoutput::ColumnValue& col : insert.new_tuple) {
    if (i) out += ",";
    AppendJsonQuoted(&out, (it != relations_.end() && i < it->second.column_names.size())
                               ? it->second.column_names[i]
                               : "column" + std::to_string(i + 1));
    out += ":";
    if (col.kind == pgoutput::ColumnKind::kText) {
      AppendJsonQuoted(&out, col.data);
    } else {
      out += col.kind == pgoutput::ColumnKind::kNull ? "null" : "\"(not text)\"";
    }
    ++i;
  }
  return out + "}";
}

bool OutboxMapper::IsOutboxMessage(const pgoutput::LogicalMessage& message) const {
  return !config_.message_prefix.empty() && message.prefix == config_.message_prefix;
}

Status OutboxMapper::MapMessage(const pgoutput::LogicalMessage& message, OutboxEvent* out) {
  Reset(out);
  if (!message.transactional()) {
    return InvalidArgumentError(
        "non-transactional outbox message: use pg_logical_emit_message(true, ...) so the event "
        "commits atomically with the business write");
  }
  simdjson::dom::element doc;
  if (auto err = json_.parse(message.content.data(), message.content.size()).get(doc)) {
    return InvalidArgumentError(std::string("envelope is not valid JSON: ") +
                                simdjson::error_message(err));
  }
  if (!doc.is_object()) return InvalidArgumentError("envelope is not a JSON object");
  auto field = [&](const char* name, bool required, std::string_view* value) -> Status {
    *value = {};
    simdjson::dom::element e;
    if (doc[name].get(e) || e.is_null()) {
      if (required) return InvalidArgumentError(std::string("envelope has no ") + name);
      return Status::Ok();
    }
    if (!e.is_string()) {
      return InvalidArgumentError(std::string("envelope field ") + name + " must be a string");
    }
    *value = e.get_string().value_unsafe();
    return Status::Ok();
  };
  std::string_view topic;
  Status first_error;
  auto keep = [&first_error](Status st) {
    if (first_error.ok() && !st.ok()) first_error = std::move(st);
  };
  keep(field("event_id", true, &out->event_id));
  keep(field("aggregate_id", true, &out->key));
  keep(field("event_type", true, &out->event_type));
  keep(field("aggregate_type", false, &out->aggregate_type));
  keep(field("topic", false, &topic));
  if (!first_error.ok()) return first_error;
  simdjson::dom::element payload;
  if (doc["payload"].get(payload)) return InvalidArgumentError("envelope has no payload");
  out->value = owned_.emplace_back(simdjson::minify(payload));
  simdjson::dom::element headers;
  if (!doc["headers"].get(headers) && !headers.is_null()) {
    WALRELAY_RETURN_IF_ERROR(AddHeaders(headers, out));
  }
  return FinishEvent("", topic, /*value_is_text=*/true, out);
}

Status OutboxMapper::AddHeaders(simdjson::dom::element headers, OutboxEvent* out) {
  simdjson::dom::object obj;
  if (headers.get(obj)) return InvalidArgumentError("headers must be a JSON object");
  for (auto [name, value] : obj) {
    if (ReservedHeaderName(config_, name)) {
      return InvalidArgumentError("header " + std::string(name) +
                                  " is reserved (walrelay writes it, or it is under walrelay., "
                                  "or ce_ / content-type with a CloudEvents outbox.format): "
                                  "rename it");
    }
    std::string_view v;
    if (value.is_string()) {
      v = value.get_string().value_unsafe();
    } else if (value.is_null()) {
      v = {};
    } else if (value.is_number() || value.is_bool()) {
      v = owned_.emplace_back(simdjson::minify(value));
    } else {
      return InvalidArgumentError("header " + std::string(name) +
                                  " must be a string, number, boolean or null");
    }
    out->extra_headers.emplace_back(name, v);
  }
  return Status::Ok();
}

Status OutboxMapper::FinishEvent(std::string_view table, std::string_view topic_column,
                                 bool value_is_text, OutboxEvent* out) {
  if (!topic_column.empty()) {
    out->topic = topic_column;
  } else {
    const std::string_view unset = ExpandTopicTemplate(table, *out);
    if (!unset.empty()) {
      return InvalidArgumentError("no topic: the topic column is NULL and ${" + std::string(unset) +
                                  "} of the topic template '" + config_.topic_template +
                                  "' is empty");
    }
    out->topic = topic_buffer_;
  }
  // The checks of a topic depend on its name only: done once per new name (most events go
  // to the topic of the event before).
  if (out->topic.empty() || out->topic != checked_topic_) {
    if (!IsValidTopicName(out->topic)) {
      return InvalidArgumentError("invalid Kafka topic name '" + std::string(out->topic) +
                                  "' (1-249 characters of [a-zA-Z0-9._-])");
    }
    const auto allows = [&](const std::string& a) {
      return !a.empty() && a.back() == '*'
                 ? out->topic.starts_with(std::string_view(a).substr(0, a.size() - 1))
                 : out->topic == a;
    };
    if (!config_.allowed_topics.empty() &&
        std::none_of(config_.allowed_topics.begin(), config_.allowed_topics.end(), allows)) {
      return InvalidArgumentError("topic '" + std::string(out->topic) +
                                  "' is not in outbox.allowed_topics; add it there if this "
                                  "writer may publish to it");
    }
    checked_topic_.assign(out->topic);
  }
  if (out->key.empty()) return InvalidArgumentError("aggregate_id is empty");
  out->value_is_bytes = !value_is_text;
  // Kafka Connect's JsonConverter envelopes (schemas.enable=true), as Debezium writes them.
  static constexpr std::string_view kKeySchema =
      R"({"schema":{"type":"string","optional":false},"payload":)";
  static constexpr std::string_view kValueSchema =
      R"({"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json",)"
      R"("version":1},"payload":)";
  auto format = [&](TextFormat f, std::string_view envelope, std::string_view* field) {
    if (f == TextFormat::kRaw) return;
    std::string& text = owned_.emplace_back();
    if (f == TextFormat::kCompactJson) {
      text.resize(field->size() + simdjson::SIMDJSON_PADDING);  // len is enough; spare room
      size_t n = 0;
      if (simdjson::minify(field->data(), field->size(), text.data(), n) == simdjson::SUCCESS) {
        text.resize(n);
        *field = text;
      }  // not JSON (a text payload column): left as it is
      return;
    }
    if (f == TextFormat::kConnectJson) text.append(envelope);
    AppendJsonQuoted(&text, *field);
    if (f == TextFormat::kConnectJson) text.push_back('}');
    *field = text;
  };
  format(config_.key_format, kKeySchema, &out->key);
  if (value_is_text) format(config_.value_format, kValueSchema, &out->value);
  return Status::Ok();
}

}  // namespace walrelay::relay
