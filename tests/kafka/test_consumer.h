// A plain librdkafka consumer for tests: assigns every partition of a topic from the
// beginning (no consumer group) and reads records back.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace walrelay::kafka::testing {

struct ConsumedRecord {
  int32_t partition = -1;
  int64_t offset = -1;
  std::string key;
  std::string value;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Reads `topic` from the beginning of each of its `partitions` partitions until `count`
// records arrived or `timeout` passed. Records are in arrival order (per partition: offset
// order).
std::vector<ConsumedRecord> ConsumeAll(const std::string& bootstraps, const std::string& topic,
                                       int partitions, size_t count,
                                       std::chrono::milliseconds timeout);

}  // namespace walrelay::kafka::testing
