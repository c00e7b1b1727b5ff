#include "test_consumer.h"

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

namespace walrelay::kafka::testing {

std::vector<ConsumedRecord> ConsumeAll(const std::string& bootstraps, const std::string& topic,
                                       int partitions, size_t count,
                                       std::chrono::milliseconds timeout) {
  return ConsumeUntil(
      bootstraps, topic, partitions,
      [count](const std::vector<ConsumedRecord>& got) { return got.size() >= count; }, timeout);
}

std::vector<ConsumedRecord> ConsumeUntil(
    const std::string& bootstraps, const std::string& topic, int partitions,
    const std::function<bool(const std::vector<ConsumedRecord>&)>& done,
    std::chrono::milliseconds timeout) {
  std::vector<ConsumedRecord> out;
  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  auto set = [&](const char* k, const char* v) {
    EXPECT_EQ(rd_kafka_conf_set(conf, k, v, errstr, sizeof(errstr)), RD_KAFKA_CONF_OK) << errstr;
  };
  set("bootstrap.servers", bootstraps.c_str());
  set("group.id", "walrelay-test-reader");
  set("enable.auto.commit", "false");
  set("enable.partition.eof", "false");
  // librdkafka's default, said here: records of open or aborted transactions are not read.
  set("isolation.level", "read_committed");
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
  if (rk == nullptr) {
    ADD_FAILURE() << errstr;
    rd_kafka_conf_destroy(conf);
    return out;
  }
  rd_kafka_poll_set_consumer(rk);
  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(partitions);
  for (int p = 0; p < partitions; ++p) {
    rd_kafka_topic_partition_list_add(parts, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  EXPECT_EQ(rd_kafka_assign(rk, parts), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_topic_partition_list_destroy(parts);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done(out) && std::chrono::steady_clock::now() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      ConsumedRecord r;
      r.partition = m->partition;
      r.offset = m->offset;
      r.timestamp_ms = rd_kafka_message_timestamp(m, nullptr);
      if (m->key != nullptr) r.key.assign(static_cast<const char*>(m->key), m->key_len);
      if (m->payload != nullptr) r.value.assign(static_cast<const char*>(m->payload), m->len);
      rd_kafka_headers_t* hdrs = nullptr;
      if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char* name;
        const void* value;
        size_t size;
        for (size_t i = 0;
             rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
             ++i) {
          r.headers.emplace_back(name, std::string(static_cast<const char*>(value), size));
        }
      }
      out.push_back(std::move(r));
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return out;
}

int64_t EndOffsetSum(const std::string& bootstraps, const std::string& topic, int partitions) {
  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps.c_str(), errstr, sizeof(errstr)) !=
      RD_KAFKA_CONF_OK) {
    rd_kafka_conf_destroy(conf);
    return -1;
  }
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    return -1;
  }
  int64_t sum = 0;
  for (int p = 0; p < partitions && sum >= 0; ++p) {
    int64_t low = 0, high = 0;
    if (rd_kafka_query_watermark_offsets(rk, topic.c_str(), p, &low, &high, 10000) !=
        RD_KAFKA_RESP_ERR_NO_ERROR) {
      sum = -1;
    } else {
      sum += high;
    }
  }
  rd_kafka_destroy(rk);
  return sum;
}

}  // namespace walrelay::kafka::testing
