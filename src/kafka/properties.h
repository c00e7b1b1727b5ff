// Setting librdkafka configuration properties without leaking their values. Properties
// carry secrets (sasl.password, sasl.oauthbearer.config, ssl.key.password, ...), so an
// error about one names the property, never its value: librdkafka's own message quotes an
// invalid value, and that quote is replaced before the message leaves this function.
// Reentrant.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_s rd_kafka_t;

namespace walrelay::kafka {

// rd_kafka_conf_set; kInvalidArgument "kafka property NAME: <librdkafka's reason>" on
// failure, with every occurrence of `value` in the reason replaced by "<redacted>", and
// for a Java client property librdkafka does not know (sasl.jaas.config,
// ssl.truststore.location, ...) the librdkafka property to use instead.
// The value of a property whose name says it holds a secret (IsSecretProperty) is also
// remembered for the rest of the process, so that LogLibrdkafka masks it.
Status SetProperty(rd_kafka_conf_t* conf, const std::string& name, const std::string& value);

// Whether a property's value is a secret: its name contains password, secret, jaas,
// oauthbearer.config, or names key material (.pem, key).
bool IsSecretProperty(std::string_view name);

// librdkafka's log callback for every client walrelay makes (rd_kafka_conf_set_log_cb):
// the line goes to walrelay's log (its format, its level mapping) with every remembered
// secret value replaced by ********. librdkafka's own lines may quote property values
// (configuration warnings, debug dumps), and a log is no place for a password. A line
// repeated within 60 s (but for its numbers) is held back and counted (log_repeats.h),
// debug lines excepted. Thread-safe.
void LogLibrdkafka(const rd_kafka_t* rk, int level, const char* facility, const char* line);

// `line` with every remembered secret value masked (what LogLibrdkafka writes). Exposed
// for tests.
std::string MaskSecrets(std::string line);

}  // namespace walrelay::kafka
