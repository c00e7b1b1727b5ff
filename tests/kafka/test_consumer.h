// A plain librdkafka consumer for tests: assigns every partition of a topic from the
// beginning (no consumer group) and reads records back, read_committed (records of open or
// aborted Kafka transactions are not read).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace walrelay::kafka::testing {

struct ConsumedRecord {
  int32_t partition = -1;
  int64_t offset = -1;
  std::string key;
  std::string value;
  std::vector<std::pair<std::string, std::string>> headers;
  int64_t timestamp_ms = -1;  // the record's timestamp (CreateTime), -1 when none

  // The first header named `name`, or "" when absent.
  std::string Header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) return v;
    }
    return "";
  }
};

// Reads `topic` from the beginning of each of its `partitions` partitions until `count`
// records arrived or `timeout` passed. Records are in arrival order (per partition: offset
// order).
std::vector<ConsumedRecord> ConsumeAll(const std::string& bootstraps, const std::string& topic,
                                       int partitions, size_t count,
                                       std::chrono::milliseconds timeout);

// Reads every partition of `topic` from the beginning until done(records so far) is true
// or `timeout` passes; returns what was read.
std::vector<ConsumedRecord> ConsumeUntil(
    const std::string& bootstraps, const std::string& topic, int partitions,
    const std::function<bool(const std::vector<ConsumedRecord>&)>& done,
    std::chrono::milliseconds timeout);

// The sum over partitions 0..partitions-1 of `topic`'s high watermark (records appended),
// or -1 on error.
int64_t EndOffsetSum(const std::string& bootstraps, const std::string& topic, int partitions);

}  // namespace walrelay::kafka::testing
