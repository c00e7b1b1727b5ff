#include "src/kafka/mock_cluster.h"

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

#include <string>

#include "src/kafka/producer.h"
#include "test_consumer.h"

namespace walrelay::kafka {
namespace {

using namespace std::chrono_literals;

// Partition count of `topic` as the cluster reports it; -1 if absent.
int PartitionCount(Producer& producer, const std::string& topic) {
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(producer.handle(), topic.c_str(), nullptr);
  const rd_kafka_metadata_t* md = nullptr;
  int count = -1;
  if (rd_kafka_metadata(producer.handle(), 0, rkt, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      count = md->topics[0].partition_cnt;
    }
    rd_kafka_metadata_destroy(md);
  }
  rd_kafka_topic_destroy(rkt);
  return count;
}

std::unique_ptr<Producer> MakeProducer(const MockCluster& cluster, DeliveryCallback cb) {
  ProducerOptions options;
  options.properties = {{"bootstrap.servers", cluster.bootstraps()}};
  auto producer = Producer::Create(std::move(options), std::move(cb));
  EXPECT_TRUE(producer.ok()) << producer.status().ToString();
  return producer.ok() ? std::move(*producer) : nullptr;
}

TEST(MockClusterTest, BootstrapsListEveryBroker) {
  auto cluster = MockCluster::Create(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  const std::string& b = (*cluster)->bootstraps();
  EXPECT_EQ(std::count(b.begin(), b.end(), ','), 2) << b;
  EXPECT_NE(b.find("127.0.0.1:"), std::string::npos) << b;
  EXPECT_EQ(MockCluster::Create(0).status().code(), StatusCode::kInvalidArgument);
}

TEST(MockClusterTest, TopicsExplicitAndAutoCreated) {
  auto cluster = MockCluster::Create(2);
  ASSERT_TRUE(cluster.ok());
  MockCluster& c = **cluster;
  ASSERT_TRUE(c.CreateTopic("six", 6, 2).ok());
  EXPECT_EQ(c.CreateTopic("six", 6, 2).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(c.CreateTopic("bad", 0, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.CreateTopic("bad", 1, 3).code(), StatusCode::kInvalidArgument);

  auto producer = MakeProducer(c, [](uint64_t, const Status&, const DeliveredRecord&) {});
  ASSERT_NE(producer, nullptr);
  EXPECT_EQ(PartitionCount(*producer, "six"), 6);
  // A Metadata request for an unknown topic auto-creates it with the mock's fixed default.
  EXPECT_EQ(PartitionCount(*producer, "auto"), 4);
  EXPECT_EQ(c.CreateTopic("auto", 2, 1).code(), StatusCode::kAlreadyExists);
}

TEST(MockClusterTest, BrokerIdsAreValidated) {
  auto cluster = MockCluster::Create(2);
  ASSERT_TRUE(cluster.ok());
  EXPECT_EQ((*cluster)->SetBrokerDown(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*cluster)->SetBrokerDown(3).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*cluster)->SetBrokerDown(2).ok());
  EXPECT_TRUE((*cluster)->SetBrokerUp(2).ok());
  EXPECT_TRUE((*cluster)->SetAllBrokersDown().ok());
  EXPECT_TRUE((*cluster)->SetAllBrokersUp().ok());
}

// Retriable Produce errors (pushed: the broker answers with the error and appends nothing)
// are retried by the producer, not reported: every record acked once and stored once, in
// order. (This cannot show the idempotent producer's broker-side dedup: the mock's pushed
// errors happen before the append, so there is never a duplicate to drop; issue 18.)
TEST(MockClusterTest, RetriableProduceErrorsAreRetriedNotReported) {
  auto cluster = MockCluster::Create(1);
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE((*cluster)->CreateTopic("t", 1, 1).ok());
  std::vector<Status> reports;
  auto producer =
      MakeProducer(**cluster, [&](uint64_t, const Status& st, const DeliveredRecord&) { reports.push_back(st); });
  ASSERT_NE(producer, nullptr);
  ASSERT_TRUE(producer->Produce("t", "k", "warm-up", {}, 0).ok());
  ASSERT_TRUE(producer->Flush(10s).ok());
  (*cluster)->PushRequestErrors(
      0 /* Produce */, {RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, RD_KAFKA_RESP_ERR__TRANSPORT});
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(producer->Produce("t", "k", "v" + std::to_string(i), {}, i).ok());
  }
  ASSERT_TRUE(producer->Flush(10s).ok());
  ASSERT_EQ(reports.size(), 6u);
  for (const Status& st : reports) EXPECT_TRUE(st.ok()) << st.ToString();
  auto records = testing::ConsumeAll((*cluster)->bootstraps(), "t", 1, 7, 3s);
  ASSERT_EQ(records.size(), 6u);
  for (int i = 1; i <= 5; ++i) EXPECT_EQ(records[i].value, "v" + std::to_string(i));
}

// The inbox library will consume through a consumer group: check the 2.0.2 mock serves
// join/sync/offset commit/fetch well enough to resume from a committed offset.
// Observed: a new member's join waits until the previous member's session times out
// (its LeaveGroup does not end the rebalance wait), hence the short session timeout.
TEST(MockClusterTest, ConsumerGroupResumesFromCommittedOffset) {
  auto cluster = MockCluster::Create(3);
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE((*cluster)->CreateTopic("g", 2, 3).ok());
  auto producer = MakeProducer(
      **cluster, [](uint64_t, const Status& st, const DeliveredRecord&) { EXPECT_TRUE(st.ok()) << st.ToString(); });
  ASSERT_NE(producer, nullptr);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(producer->Produce("g", "k" + std::to_string(i), "v", {}, i).ok());
  }
  ASSERT_TRUE(producer->Flush(10s).ok());

  auto consume = [&](size_t want) {
    char errstr[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", (*cluster)->bootstraps().c_str(), errstr,
                      sizeof(errstr));
    rd_kafka_conf_set(conf, "group.id", "inbox", errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "session.timeout.ms", "3000", errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "heartbeat.interval.ms", "300", errstr, sizeof(errstr));
    rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    EXPECT_NE(rk, nullptr) << errstr;
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t* topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, "g", RD_KAFKA_PARTITION_UA);
    EXPECT_EQ(rd_kafka_subscribe(rk, topics), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(topics);
    size_t got = 0;
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (got < want && std::chrono::steady_clock::now() < deadline) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
      if (m == nullptr) continue;
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        ++got;
        EXPECT_EQ(rd_kafka_commit_message(rk, m, 0), RD_KAFKA_RESP_ERR_NO_ERROR);
      }
      rd_kafka_message_destroy(m);
    }
    // Nothing more than expected arrives shortly after.
    for (int i = 0; i < 5; ++i) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
      if (m == nullptr) continue;
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) ++got;
      rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return got;
  };
  EXPECT_EQ(consume(10), 10u);
  for (int i = 10; i < 13; ++i) {
    ASSERT_TRUE(producer->Produce("g", "k" + std::to_string(i), "v", {}, i).ok());
  }
  ASSERT_TRUE(producer->Flush(10s).ok());
  EXPECT_EQ(consume(3), 3u);
}

}  // namespace
}  // namespace walrelay::kafka
