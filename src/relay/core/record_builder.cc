#include "src/relay/core/record_builder.h"

#include <ctime>

#include "base/headers.h"
#include "base/json.h"

namespace walrelay::relay {
namespace {

constexpr std::string_view kSpecVersion = "1.0";

void AppendBase64(std::string* out, std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t n = (uint32_t(uint8_t(bytes[i])) << 16) |
                       (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    out->push_back(kAlphabet[n >> 18]);
    out->push_back(kAlphabet[(n >> 12) & 63]);
    out->push_back(kAlphabet[(n >> 6) & 63]);
    out->push_back(kAlphabet[n & 63]);
  }
  if (i < bytes.size()) {
    uint32_t n = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) n |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out->push_back(kAlphabet[n >> 18]);
    out->push_back(kAlphabet[(n >> 12) & 63]);
    out->push_back(i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=');
    out->push_back('=');
  }
}

void Member(std::string* doc, std::string_view name, std::string_view value) {
  if (doc->size() > 1) doc->push_back(',');
  AppendJsonQuoted(doc, name);
  doc->push_back(':');
  AppendJsonQuoted(doc, value);
}

}  // namespace

void FormatRfc3339Micros(int64_t unix_us, std::string* out) {
  const int64_t secs = unix_us >= 0 ? unix_us / 1000000 : (unix_us - 999999) / 1000000;
  const int64_t micros = unix_us - secs * 1000000;
  const std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[48];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%06lldZ", static_cast<long long>(micros));
  out->assign(buf);
}

RecordBuilder::RecordBuilder(const RelayConfig& config)
    : config_(config),
      source_(config.cloudevents_source.empty() ? "/walrelay/" + config.slot
                                                : config.cloudevents_source) {}

RecordBuilder::Data RecordBuilder::Classify(const OutboxEvent& event) {
  if (event.value_is_bytes) return Data::kBytes;
  simdjson::dom::element ignored;
  return parser_.parse(event.value.data(), event.value.size()).get(ignored) ? Data::kText
                                                                             : Data::kJson;
}

void RecordBuilder::BuildStructured(const OutboxEvent& event, Data data) {
  document_.assign("{");
  Member(&document_, "specversion", kSpecVersion);
  Member(&document_, "id", event.event_id);
  Member(&document_, "source", source_);
  Member(&document_, "type", event.event_type);
  if (!time_text_.empty()) Member(&document_, "time", time_text_);
  switch (data) {
    case Data::kJson:
      Member(&document_, "datacontenttype", "application/json");
      document_ += ",\"data\":";
      document_.append(event.value);
      break;
    case Data::kText:
      Member(&document_, "datacontenttype", "text/plain");
      document_ += ",\"data\":";
      AppendJsonQuoted(&document_, event.value);
      break;
    case Data::kBytes:
      Member(&document_, "datacontenttype", "application/octet-stream");
      document_ += ",\"data_base64\":\"";
      AppendBase64(&document_, event.value);
      document_ += '"';
      break;
  }
  document_ += '}';
}

void RecordBuilder::Build(const OutboxEvent& event, const SourcePosition& position) {
  const HeaderNames& names = config_.header_names;
  FormatPosition(position, &position_text_);
  headers_.clear();
  headers_.push_back({names.event_id, event.event_id});
  if (!names.event_type.empty()) headers_.push_back({names.event_type, event.event_type});
  if (!names.aggregate_type.empty() && !event.aggregate_type.empty()) {
    headers_.push_back({names.aggregate_type, event.aggregate_type});
  }
  for (const auto& [name, value] : event.extra_headers) headers_.push_back({name, value});
  value_ = event.value;
  if (config_.record_format != RecordFormat::kWalrelay) {
    time_text_.clear();
    if (position.commit_time_us > 0) FormatRfc3339Micros(position.commit_time_us, &time_text_);
    const Data data = Classify(event);
    if (config_.record_format == RecordFormat::kCloudEventsBinary) {
      headers_.push_back({headers::kCeSpecversion, kSpecVersion});
      headers_.push_back({headers::kCeId, event.event_id});
      headers_.push_back({headers::kCeSource, source_});
      headers_.push_back({headers::kCeType, event.event_type});
      if (!time_text_.empty()) headers_.push_back({headers::kCeTime, time_text_});
      headers_.push_back({headers::kContentType, data == Data::kJson   ? "application/json"
                                                 : data == Data::kText ? "text/plain"
                                                                       : "application/octet-stream"});
    } else {
      BuildStructured(event, data);
      headers_.push_back({headers::kContentType, "application/cloudevents+json; charset=UTF-8"});
      value_ = document_;
    }
  }
  headers_.push_back({names.position, position_text_});
}

}  // namespace walrelay::relay
