#include "src/kafka/latest_value.h"

#include <librdkafka/rdkafka.h>
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "src/kafka/properties.h"
#include "src/kafka/topic_admin.h"

namespace walrelay::kafka {

namespace {

struct Destroy {
  void operator()(rd_kafka_t* rk) const {
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
  }
};

}  // namespace

Result<std::optional<std::string>> LatestCommittedValue(
    const std::vector<std::pair<std::string, std::string>>& properties, std::string_view topic,
    std::string_view key, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string topic_name(topic);
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  auto configure = [&]() -> Status {
    for (const auto& [name, value] : properties) {
      if (ForAnyClient(name)) WALRELAY_RETURN_IF_ERROR(SetProperty(conf, name, value));
    }
    // No group: nothing is committed, no rebalance; a group.id is still required by
    // librdkafka's consumer, and never used with assign().
    WALRELAY_RETURN_IF_ERROR(SetProperty(conf, "group.id", "walrelay-checkpoint-reader"));
    WALRELAY_RETURN_IF_ERROR(SetProperty(conf, "enable.auto.commit", "false"));
    WALRELAY_RETURN_IF_ERROR(SetProperty(conf, "enable.partition.eof", "true"));
    WALRELAY_RETURN_IF_ERROR(SetProperty(conf, "isolation.level", "read_committed"));
    return Status::Ok();
  };
  if (Status st = configure(); !st.ok()) {
    rd_kafka_conf_destroy(conf);
    return st;
  }
  rd_kafka_conf_set_log_cb(conf, &LogLibrdkafka);
  char errstr[512];
  rd_kafka_t* raw = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
  if (raw == nullptr) {
    rd_kafka_conf_destroy(conf);
    return InvalidArgumentError(fmt::format("kafka consumer for {}: {}", topic_name, errstr));
  }
  std::unique_ptr<rd_kafka_t, Destroy> rk(raw);
  rd_kafka_poll_set_consumer(rk.get());

  // The topic's partitions.
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk.get(), topic_name.c_str(), nullptr);
  const rd_kafka_metadata_t* metadata = nullptr;
  const int metadata_ms = static_cast<int>(std::max<int64_t>(1, timeout.count()));
  rd_kafka_resp_err_t err = rd_kafka_metadata(rk.get(), 0, rkt, &metadata, metadata_ms);
  rd_kafka_topic_destroy(rkt);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return UnavailableError(fmt::format("kafka metadata for topic {}: {} ({})", topic_name,
                                        rd_kafka_err2str(err), rd_kafka_err2name(err)));
  }
  const rd_kafka_metadata_topic_t* t = metadata->topic_cnt > 0 ? &metadata->topics[0] : nullptr;
  if (t == nullptr || t->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
      t->err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC) {
    rd_kafka_metadata_destroy(metadata);
    return NotFoundError("kafka topic " + topic_name + " does not exist");
  }
  if (t->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    const std::string why = fmt::format("kafka topic {}: {} ({})", topic_name,
                                        rd_kafka_err2str(t->err), rd_kafka_err2name(t->err));
    rd_kafka_metadata_destroy(metadata);
    return t->err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ? PermissionDeniedError(why)
                                                                   : UnavailableError(why);
  }
  const int partitions = t->partition_cnt;
  rd_kafka_metadata_destroy(metadata);

  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(partitions);
  for (int p = 0; p < partitions; ++p) {
    rd_kafka_topic_partition_list_add(parts, topic_name.c_str(), p)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
  }
  err = rd_kafka_assign(rk.get(), parts);
  rd_kafka_topic_partition_list_destroy(parts);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return UnavailableError(fmt::format("kafka assign {}: {}", topic_name, rd_kafka_err2str(err)));
  }

  // Newest per partition by offset; across partitions a key lives in one (the producer's
  // partitioner), so the last one read for the key is the newest.
  std::optional<std::string> latest;
  std::vector<bool> ended(static_cast<size_t>(partitions), false);  // read to its end
  int at_end = 0;
  while (at_end < partitions) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return DeadlineExceededError(fmt::format(
          "kafka topic {}: not read to its end within {} ms ({} of {} partitions read; a "
          "transaction left open by a producer that was not fenced holds readers back until "
          "it times out)",
          topic_name, timeout.count(), at_end, partitions));
    }
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk.get(), 100);
    if (m == nullptr) continue;
    const auto part = static_cast<size_t>(m->partition);
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      if (part < ended.size() && !ended[part]) {
        ended[part] = true;
        ++at_end;
      }
    } else if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      const std::string why = fmt::format("kafka reading {}: {}", topic_name,
                                          rd_kafka_message_errstr(m));
      rd_kafka_message_destroy(m);
      return UnavailableError(why);
    } else if (part < ended.size() && ended[part]) {
      // Committed after this partition's end was seen: read on to the new end.
      ended[part] = false;
      --at_end;
    }
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && m->key != nullptr &&
        std::string_view(static_cast<const char*>(m->key), m->key_len) == key) {
      if (m->payload == nullptr) {
        latest.reset();  // a tombstone: the key was deleted
      } else {
        latest.emplace(static_cast<const char*>(m->payload), m->len);
      }
    }
    rd_kafka_message_destroy(m);
  }
  return latest;
}

}  // namespace walrelay::kafka
