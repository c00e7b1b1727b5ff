// Shared helpers of the inbox integration tests: producing payment events to a mock
// cluster, polling a condition, and querying the ledger tables.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "src/kafka/mock_cluster.h"
#include "src/kafka/producer.h"
#include "tests/support/pg_cluster.h"
#include "tests/support/wait.h"

namespace walrelay::inbox::testing {

using namespace std::chrono_literals;

struct Event {
  std::string event_id;  // empty: no event_id header
  std::string key;
  std::string value;
};

// The payment event `i`: wallet w<i % wallets>, amount i + 1, event id "evt-<i>".
inline Event Payment(int i, int wallets = 100) {
  const std::string wallet = "w" + std::to_string(i % wallets);
  return {"evt-" + std::to_string(i), wallet,
          R"({"wallet":")" + wallet + R"(","amount":)" + std::to_string(i + 1) + "}"};
}

// Produces `events` to `topic` and waits for every ack.
inline void ProduceAll(const std::string& bootstraps, const std::string& topic,
                       const std::vector<Event>& events) {
  kafka::ProducerOptions opt;
  opt.properties = {{"bootstrap.servers", bootstraps}, {"linger.ms", "5"}};
  size_t failed = 0;
  auto producer =
      kafka::Producer::Create(opt, [&](uint64_t, const Status& st, const kafka::DeliveredRecord&) {
        if (!st.ok()) ++failed;
      });
  ASSERT_TRUE(producer.ok()) << producer.status().ToString();
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    std::vector<kafka::Header> headers = {{"event_type", "payment"}};
    if (!e.event_id.empty()) headers.push_back({"event_id", e.event_id});
    ASSERT_TRUE((*producer)->Produce(topic, e.key, e.value, headers, i).ok());
  }
  ASSERT_TRUE((*producer)->Flush(60s).ok());
  ASSERT_EQ(failed, 0u);
}

using walrelay::testing::WaitFor;

inline int64_t QueryInt(const walrelay::testing::TestCluster& pg, const std::string& sql) {
  auto v = pg.QueryScalar(sql);
  if (!v.ok()) {
    ADD_FAILURE() << sql << ": " << v.status().ToString();
    return -1;
  }
  return std::stoll(*v);
}

// Short group timeouts: the 2.0.2 mock makes a new member wait for the previous member's
// session timeout.
inline std::vector<std::pair<std::string, std::string>> FastGroupProperties() {
  return {{"session.timeout.ms", "6000"},
          {"heartbeat.interval.ms", "500"},
          {"auto.commit.interval.ms", "500"}};
}

}  // namespace walrelay::inbox::testing
