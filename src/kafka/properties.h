// Setting librdkafka configuration properties without leaking their values. Properties
// carry secrets (sasl.password, sasl.oauthbearer.config, ssl.key.password, ...), so an
// error about one names the property, never its value: librdkafka's own message quotes an
// invalid value, and that quote is replaced before the message leaves this function.
// Reentrant.
#pragma once

#include <string>

#include "base/status.h"

typedef struct rd_kafka_conf_s rd_kafka_conf_t;

namespace walrelay::kafka {

// rd_kafka_conf_set; kInvalidArgument "kafka property NAME: <librdkafka's reason>" on
// failure, with every occurrence of `value` in the reason replaced by "<redacted>", and
// for a Java client property librdkafka does not know (sasl.jaas.config,
// ssl.truststore.location, ...) the librdkafka property to use instead.
Status SetProperty(rd_kafka_conf_t* conf, const std::string& name, const std::string& value);

}  // namespace walrelay::kafka
