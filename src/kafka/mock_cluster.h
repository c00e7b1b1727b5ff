// MockCluster: an in-process Kafka cluster (librdkafka's rdkafka_mock.h) that speaks the
// real Kafka protocol over loopback TCP. For tests and walrelay-devbroker; not production.
//
// What librdkafka 2.0.2's mock does (observed and read from its source):
//   - brokers are numbered 1..N and listen on 127.0.0.1 ephemeral ports;
//   - topics: created explicitly (CreateTopic) or auto-created by a client's Metadata
//     request with 4 partitions and replication factor min(3, N); the auto-create
//     partition count is fixed (no API to change it in 2.0.2); CreateTopics (Admin API)
//     is not supported;
//   - produce (idempotent too; pushed Produce errors are retried without duplicates),
//     fetch, list offsets and classic consumer groups (FindCoordinator/JoinGroup/SyncGroup/
//     Heartbeat/OffsetCommit/OffsetFetch) work. A new group member's join waits until the
//     previous member's session has timed out, so keep session.timeout.ms short in tests;
//   - broker down closes its connections and refuses new ones (connection refused);
//     partition leadership does not move, so with all brokers down records wait until
//     they are up again (walrelay's producer never times records out);
//   - idempotent sequence numbers are not checked: a request sent after an earlier one
//     failed is written;
//   - rd_kafka_mock_topic_set_error makes Metadata answer a topic error (e.g. unknown
//     topic, topic authorization failed); a record of such a topic is not refused by
//     Produce (librdkafka keeps it queued or fails it after its metadata propagation time);
//   - in-memory only: no persistence, no retention; size limits are the client's
//     (message.max.bytes is enforced by the producer before sending).
//
// Thread safety: all methods may be called from any thread (librdkafka serialises the
// mock's control operations through its op queue).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_mock_cluster_s rd_kafka_mock_cluster_t;

namespace walrelay::kafka {

class MockCluster {
 public:
  // Starts `brokers` (>= 1) mock brokers. The cluster lives until destruction.
  static Result<std::unique_ptr<MockCluster>> Create(int brokers);
  ~MockCluster();
  MockCluster(const MockCluster&) = delete;
  MockCluster& operator=(const MockCluster&) = delete;

  // "127.0.0.1:port,127.0.0.1:port,...": the bootstrap.servers for clients.
  const std::string& bootstraps() const { return bootstraps_; }
  int broker_count() const { return brokers_; }

  // Creates `name` with `partitions` partitions; replication_factor <= broker_count().
  // kAlreadyExists when the topic exists (including auto-created ones).
  Status CreateTopic(std::string_view name, int partitions, int replication_factor = 1);

  // Broker `id` in 1..broker_count() disconnects its clients and refuses new connections
  // (down), or accepts them again (up). Leadership does not move.
  Status SetBrokerDown(int32_t id);
  Status SetBrokerUp(int32_t id);
  Status SetAllBrokersDown();
  Status SetAllBrokersUp();

  // Delays every response of broker `id` (-1: all) by `rtt_ms`.
  Status SetBrokerRtt(int32_t id, int rtt_ms);

  // The next errors.size() requests of Kafka API `api_key` (e.g. 0 = Produce) fail with
  // these rd_kafka_resp_err_t codes, in order (RD_KAFKA_RESP_ERR__TRANSPORT disconnects).
  void PushRequestErrors(int16_t api_key, const std::vector<int>& errors);
  // Drops the errors still pushed for `api_key`.
  void ClearRequestErrors(int16_t api_key);

  // Every request about topic `name` fails with `error` from now on (0 clears it), e.g.
  // UNKNOWN_TOPIC_OR_PART for a topic that does not exist (the mock would otherwise
  // auto-create it) or TOPIC_AUTHORIZATION_FAILED for one the client may not write.
  void SetTopicError(std::string_view name, int error);

  // The raw handle, for mock features not wrapped here. Owned by the MockCluster.
  rd_kafka_mock_cluster_t* handle() const { return mcluster_; }

 private:
  MockCluster() = default;
  Status CheckBroker(int32_t id) const;

  rd_kafka_t* rk_ = nullptr;  // the handle librdkafka requires to own the mock
  rd_kafka_mock_cluster_t* mcluster_ = nullptr;
  int brokers_ = 0;
  std::string bootstraps_;
};

}  // namespace walrelay::kafka
