#include "src/kafka/properties.h"

#include <librdkafka/rdkafka.h>

#include <string_view>

namespace walrelay::kafka {

namespace {

// Java client properties that librdkafka does not have, and what to use instead.
struct JavaProperty {
  std::string_view name;
  std::string_view instead;
};
constexpr JavaProperty kJavaProperties[] = {
    {"sasl.jaas.config",
     "sasl.username and sasl.password (with sasl.mechanism PLAIN or SCRAM-SHA-256/512), or "
     "sasl.oauthbearer.config"},
    {"ssl.truststore.location", "ssl.ca.location (a PEM file of the CA certificates)"},
    {"ssl.truststore.password", "nothing: ssl.ca.location is a PEM file without a password"},
    {"ssl.truststore.type", "ssl.ca.location (PEM); a JKS store must be converted to PEM"},
    {"ssl.keystore.type",
     "ssl.keystore.location (PKCS#12 only) or ssl.certificate.location + ssl.key.location (PEM)"},
    {"max.request.size", "message.max.bytes"},
    {"buffer.memory", "queue.buffering.max.kbytes (in kilobytes)"},
    {"key.serializer", "nothing: walrelay writes keys as bytes"},
    {"value.serializer", "nothing: walrelay writes values as bytes"},
    {"key.deserializer", "nothing: the inbox reads keys as bytes"},
    {"value.deserializer", "nothing: the inbox reads values as bytes"},
};

}  // namespace

Status SetProperty(rd_kafka_conf_t* conf, const std::string& name, const std::string& value) {
  char errstr[512];
  if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), errstr, sizeof(errstr)) ==
      RD_KAFKA_CONF_OK) {
    return Status::Ok();
  }
  std::string reason(errstr);
  if (!value.empty()) {
    for (size_t at = reason.find(value); at != std::string::npos;
         at = reason.find(value, at + 10)) {
      reason.replace(at, value.size(), "<redacted>");
    }
  }
  std::string hint;
  for (const JavaProperty& j : kJavaProperties) {
    if (name == j.name) hint = "; this is a Java client property, librdkafka's equivalent: " +
                               std::string(j.instead);
  }
  return InvalidArgumentError("kafka property " + name + ": " + reason + hint +
                              " (the value is not shown: properties can hold secrets)");
}

}  // namespace walrelay::kafka
