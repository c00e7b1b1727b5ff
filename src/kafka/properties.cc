#include "src/kafka/properties.h"

#include <librdkafka/rdkafka.h>

namespace walrelay::kafka {

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
  return InvalidArgumentError("kafka property " + name + ": " + reason +
                              " (the value is not shown: properties can hold secrets)");
}

}  // namespace walrelay::kafka
