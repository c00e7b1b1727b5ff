#include "src/kafka/properties.h"

#include <librdkafka/rdkafka.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>
#include <string_view>
#include <vector>

#include "src/kafka/log_repeats.h"

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

namespace {

std::mutex& SecretsMutex() {
  static std::mutex m;
  return m;
}
std::vector<std::string>& Secrets() {
  static std::vector<std::string> secrets;
  return secrets;
}

}  // namespace

bool IsSecretProperty(std::string_view name) {
  for (std::string_view word : {"password", "secret", "jaas", "oauthbearer.config", ".pem", "key"}) {
    if (name.find(word) != std::string_view::npos) return true;
  }
  return false;
}

std::string MaskSecrets(std::string line) {
  std::lock_guard<std::mutex> lock(SecretsMutex());
  for (const std::string& secret : Secrets()) {
    for (size_t at = line.find(secret); at != std::string::npos; at = line.find(secret, at + 8)) {
      line.replace(at, secret.size(), "********");
    }
  }
  return line;
}

void LogLibrdkafka(const rd_kafka_t* /*rk*/, int level, const char* facility, const char* line) {
  // librdkafka logs connection failures at 3 (LOG_ERR); they are transient, so warn.
  auto spd = level <= 2   ? spdlog::level::err
             : level == 3 ? spdlog::level::warn
             : level == 4 ? spdlog::level::warn
             : level <= 6 ? spdlog::level::info
                          : spdlog::level::debug;
  // Debug lines are asked for (kafka.properties debug=...): every one is shown.
  static RepeatedLineFilter repeats;
  std::string text = MaskSecrets(line);
  std::string note;
  if (spd != spdlog::level::debug) {
    auto admitted = repeats.Admit(std::string(facility) + " " + text,
                                  RepeatedLineFilter::Clock::now());
    if (!admitted) return;
    note = std::move(*admitted);
  }
  spdlog::log(spd, "rdkafka {}: {}{}", facility, text, note);
}

Status SetProperty(rd_kafka_conf_t* conf, const std::string& name, const std::string& value) {
  // Secrets of at least 4 bytes (shorter ones would mask ordinary words of log lines).
  if (IsSecretProperty(name) && value.size() >= 4) {
    std::lock_guard<std::mutex> lock(SecretsMutex());
    auto& secrets = Secrets();
    if (std::find(secrets.begin(), secrets.end(), value) == secrets.end()) {
      secrets.push_back(value);
    }
  }
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
