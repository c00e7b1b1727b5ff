// ReadCloudEvent (inbox.h): the Kafka protocol binding of CloudEvents 1.0, read back.
#include <simdjson.h>

#include "base/headers.h"
#include "src/inbox/inbox.h"

namespace walrelay::inbox {
namespace {

bool StartsWithIgnoringCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && headers::SameNameIgnoringCase(s.substr(0, prefix.size()), prefix);
}

Result<std::string> DecodeBase64(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) return InvalidArgumentError("CloudEvent data_base64 is not base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

Status CheckRequired(const CloudEvent& e) {
  for (const auto& [name, value] : {std::pair<const char*, const std::string*>{"specversion", &e.specversion},
                                    {"id", &e.id},
                                    {"source", &e.source},
                                    {"type", &e.type}}) {
    if (value->empty()) {
      return InvalidArgumentError(std::string("CloudEvent without its required attribute ") + name);
    }
  }
  if (!e.specversion.starts_with("1.")) {
    return InvalidArgumentError("CloudEvent specversion " + e.specversion + " is not 1.x");
  }
  return Status::Ok();
}

}  // namespace

Result<std::optional<CloudEvent>> ReadCloudEvent(const InboxMessage& message) {
  const std::string_view content_type = message.Header(headers::kContentType).value_or("");
  if (StartsWithIgnoringCase(content_type, "application/cloudevents+json")) {
    simdjson::dom::parser parser;
    simdjson::dom::object doc;
    if (parser.parse(message.value.data(), message.value.size()).get(doc)) {
      return InvalidArgumentError("CloudEvent (structured mode) whose value is not a JSON object");
    }
    CloudEvent e;
    // JSON event format: with a JSON datacontenttype (or none) `data` is a JSON value,
    // handed over as its JSON text; otherwise it is a string, handed over as its content.
    std::string_view data_type;
    const bool json_data = doc["datacontenttype"].get(data_type) != simdjson::SUCCESS ||
                           data_type.ends_with("json") || data_type.find("json;") != data_type.npos;
    for (auto [key, value] : doc) {
      std::string_view text;
      const bool is_string = !value.get(text);
      if (key == "data") {
        e.data = !json_data && is_string ? std::string(text) : simdjson::minify(value);
      } else if (key == "data_base64") {
        if (!is_string) return InvalidArgumentError("CloudEvent data_base64 is not a string");
        WALRELAY_ASSIGN_OR_RETURN(e.data, DecodeBase64(text));
      } else if (is_string) {
        if (key == "specversion") e.specversion = text;
        if (key == "id") e.id = text;
        if (key == "source") e.source = text;
        if (key == "type") e.type = text;
        if (key == "time") e.time = text;
        if (key == "datacontenttype") e.datacontenttype = text;
        if (key == "subject") e.subject = text;
      }
    }
    WALRELAY_RETURN_IF_ERROR(CheckRequired(e));
    return std::optional<CloudEvent>(std::move(e));
  }
  const auto specversion = message.Header(headers::kCeSpecversion);
  if (!specversion) return std::optional<CloudEvent>();
  CloudEvent e;
  e.specversion = *specversion;
  e.id = message.Header(headers::kCeId).value_or("");
  e.source = message.Header(headers::kCeSource).value_or("");
  e.type = message.Header(headers::kCeType).value_or("");
  e.time = message.Header(headers::kCeTime).value_or("");
  e.subject = message.Header("ce_subject").value_or("");
  e.datacontenttype = content_type;
  e.data = message.value;
  WALRELAY_RETURN_IF_ERROR(CheckRequired(e));
  return std::optional<CloudEvent>(std::move(e));
}

}  // namespace walrelay::inbox
