// TestBroker: the Kafka a relay or inbox suite runs against, chosen by the environment.
//
//   WALRELAY_TEST_BROKER unset or `dev`: librdkafka's mock cluster, one per test (fast; what
//       ctest runs). It also injects faults a real cluster cannot be asked for: pushed
//       request errors, response delays, metadata errors of one topic (mock()).
//   WALRELAY_TEST_BROKER=apache: the program's Apache Kafka cluster (ApacheKafka::Shared,
//       three brokers, replication factor 3, min.insync.replicas=2, no auto-created
//       topics). Create() deletes every topic the previous test left, so each test starts
//       from an empty cluster as it does on the dev broker. Run a suite program directly
//       (scripts/test.sh --suites-on-apache does), not one ctest entry per test: every
//       process would start a cluster of its own.
//
// A test that needs what only the dev broker does says so with WALRELAY_NEEDS_DEV_BROKER,
// which skips it on Apache Kafka with the reason.
//
// Thread safety: one test thread (the mock's controls may be called from any thread).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "src/kafka/mock_cluster.h"
#include "tests/support/apache_kafka.h"

namespace walrelay::testing {

class TestBroker {
 public:
  // True when WALRELAY_TEST_BROKER=apache.
  static bool OnApache();
  // Dev broker: a mock cluster of `brokers` brokers. Apache Kafka: the shared cluster
  // (its three brokers whatever `brokers` says), emptied of topics and whole (every broker
  // running, none paused).
  static Result<std::unique_ptr<TestBroker>> Create(int brokers);

  const std::string& bootstraps() const;
  // "the dev broker" or "Apache Kafka 3-broker cluster", for messages.
  std::string name() const;

  // Creates `name`. On Apache Kafka the replication factor is the cluster's (3) whatever
  // `replication_factor` says, and it returns once every partition has a full ISR.
  Status CreateTopic(std::string_view name, int partitions, int replication_factor = 1);

  // `name` answers as a topic that does not exist until TopicAppears(name): on the dev
  // broker it is created and its metadata answers UNKNOWN_TOPIC_OR_PART (the mock would
  // otherwise create it when a client names it); on Apache Kafka it is not created yet.
  Status MakeTopicMissing(std::string_view name, int partitions);
  Status TopicAppears(std::string_view name);

  // Every broker down (dev: refuses connections; Apache Kafka: kill -9 of each broker) or
  // up again (Apache Kafka: each broker restarted; returns once every partition of the
  // topics made by CreateTopic has its full ISR again, as a cluster that serves).
  Status SetAllBrokersDown();
  Status SetAllBrokersUp();

  // The mock cluster, or nullptr on Apache Kafka.
  kafka::MockCluster* mock() { return mock_.get(); }
  // The Apache Kafka cluster, or nullptr on the dev broker.
  ApacheKafka* apache() { return apache_; }

 private:
  TestBroker() = default;
  std::unique_ptr<kafka::MockCluster> mock_;
  ApacheKafka* apache_ = nullptr;
  std::map<std::string, int, std::less<>> missing_;  // name -> partitions
  std::vector<std::pair<std::string, int>> topics_;   // made by CreateTopic
};

}  // namespace walrelay::testing

// Skips the current test on Apache Kafka, saying which dev-broker feature it needs.
#define WALRELAY_NEEDS_DEV_BROKER(broker, feature)                                    \
  if ((broker)->mock() == nullptr)                                                    \
  GTEST_SKIP() << "needs the dev broker (" << (feature)                               \
               << "), which a real cluster cannot be asked for; runs without "        \
                  "WALRELAY_TEST_BROKER=apache"
