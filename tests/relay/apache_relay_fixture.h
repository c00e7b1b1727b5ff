// ApacheRelayTest: the relay in this process against the Apache Kafka cluster of
// scripts/kafka.sh (tests/support/apache_kafka.h), a topic of its own per test, a writer
// of numbered events, and checks a user would make of what the topic holds: every event,
// each key on one partition in commit order, (exactly once) no repeat. Shared by the
// Apache Kafka tests (apache_kafka_test.cc) and the network-fault tests
// (tests/network/network_fault_test.cc).
//
// Tests skip, saying how to run them, unless WALRELAY_TEST_KAFKA=apache.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/kafka/test_consumer.h"
#include "tests/relay/relay_fixture.h"
#include "tests/support/apache_kafka.h"

namespace walrelay::relay {

class ApacheRelayTest : public RelayTest {
 protected:
  using ConsumedRecord = kafka::testing::ConsumedRecord;
  static constexpr int kTopicPartitions = 6;

  void SetUp() override {
    if (std::string why = testing::ApacheKafka::SkipReason(); !why.empty()) GTEST_SKIP() << why;
    RelayTest::SetUp();
    auto cluster = testing::ApacheKafka::Shared();
    ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
    cluster_ = *cluster;
    topic_ = cluster_->UniqueTopic("apache");
    ASSERT_TRUE(cluster_->CreateTopic(topic_, kTopicPartitions).ok());
    config_.bootstrap_servers = cluster_->bootstraps();
    config_.topic_template = topic_;
  }

  void TearDown() override {
    if (cluster_ == nullptr) return;
    StopWriter();
    RelayTest::TearDown();
    Status restored = cluster_->RestoreAll({{topic_, kTopicPartitions}});
    EXPECT_TRUE(restored.ok()) << "the next test needs every broker back: " << restored.ToString();
  }

  // Commits a transaction of 5 rows every 10 ms until StopWriter(): seq 1, 2, ... in commit
  // order, aggregates agg-0..agg-19.
  void StartWriter() {
    writer_ = std::thread([this] {
      PGconn* c = PQconnectdb(pg_->conninfo().c_str());
      while (!stop_writer_.load()) {
        const int lo = written_.load() + 1;
        const std::string sql =
            "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) SELECT "
            "'payment', 'agg-' || (g % 20), 'PaymentCaptured', jsonb_build_object('seq', g) "
            "FROM generate_series(" +
            std::to_string(lo) + ", " + std::to_string(lo + 4) + ") g";
        PGresult* r = PQexec(c, sql.c_str());
        const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        if (!ok) {
          writer_failed_ = true;
          break;
        }
        written_ += 5;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      PQfinish(c);
    });
  }
  void StopWriter() {
    stop_writer_ = true;
    if (writer_.joinable()) writer_.join();
  }

  // Reads the topic until every seq 1..`expected` was seen (or 60 s passed).
  std::vector<kafka::testing::ConsumedRecord> ReadAll(int expected) {
    std::set<int> seen;
    size_t scanned = 0;
    return kafka::testing::ConsumeUntil(
        cluster_->bootstraps(), topic_, kTopicPartitions,
        [&](const std::vector<kafka::testing::ConsumedRecord>& got) {
          for (; scanned < got.size(); ++scanned) seen.insert(Seq(got[scanned]));
          return static_cast<int>(seen.size()) >= expected;
        },
        std::chrono::seconds(60));
  }

  static int Seq(const kafka::testing::ConsumedRecord& r) {
    const size_t at = r.value.find("\"seq\": ");
    return at == std::string::npos ? -1 : std::stoi(r.value.substr(at + 7));
  }

  // Every seq 1..expected exactly `once` (or at least once), each key on one partition
  // and its seqs in commit order.
  void ExpectEveryEventInOrder(const std::vector<kafka::testing::ConsumedRecord>& records, int expected,
                               bool exactly_once) {
    std::map<int, int> copies;
    std::map<std::string, int> last_seq, partition_of;
    for (const auto& r : records) {
      const int seq = Seq(r);
      ASSERT_GT(seq, 0) << r.value;
      ASSERT_EQ(r.key, "agg-" + std::to_string(seq % 20));
      auto [p, fresh_key] = partition_of.emplace(r.key, r.partition);
      EXPECT_EQ(p->second, r.partition) << "aggregate " << r.key << " on two partitions";
      if (++copies[seq] > 1) continue;  // a duplicate: judged below
      auto [ls, first] = last_seq.emplace(r.key, seq);
      if (!first) {
        EXPECT_LT(ls->second, seq) << "aggregate " << r.key << " out of commit order";
        ls->second = seq;
      }
    }
    int missing = 0, duplicated = 0;
    for (int s = 1; s <= expected; ++s) {
      if (copies[s] == 0) ++missing;
      if (copies[s] > 1) ++duplicated;
    }
    EXPECT_EQ(missing, 0) << "events lost";
    EXPECT_EQ(static_cast<int>(copies.size()), expected) << "events nobody wrote";
    if (exactly_once) {
      EXPECT_EQ(duplicated, 0) << "duplicates within one producer session";
    }
  }

  // The SASL_SSL listener (whose ACLs apply) as the principal User:walrelay, PLAIN.
  void UseSaslAsWalrelay() {
    config_.bootstrap_servers = cluster_->sasl_bootstraps();
    config_.kafka_properties = {{"security.protocol", "SASL_SSL"},
                                {"sasl.mechanisms", "PLAIN"},
                                {"sasl.username", "walrelay"},
                                {"sasl.password", cluster_->walrelay_password()},
                                {"ssl.ca.location", cluster_->ca_path()}};
  }

  std::string Readyz() {
    httplib::Client client("127.0.0.1", relay_->metrics_port());
    auto r = client.Get("/readyz");
    return r ? std::to_string(r->status) + " " + r->body : "no answer";
  }

  // Reads /readyz until it contains `text` (15 s at most), checking at every read that the
  // slot was not confirmed up to `unconfirmed` (the WAL position after the waiting events);
  // returns the last answer.
  std::string ReadyzOnceItSays(const std::string& text, const std::string& unconfirmed) {
    std::string readyz;
    for (int i = 0; i < 300 && readyz.find(text) == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      readyz = Readyz();
      EXPECT_LT(ConfirmedFlush(), *Lsn::Parse(unconfirmed)) << "confirmed unacked events";
    }
    return readyz;
  }

  testing::ApacheKafka* cluster_ = nullptr;
  std::string topic_;
  std::thread writer_;
  std::atomic<bool> stop_writer_{false};
  std::atomic<int> written_{0};
  std::atomic<bool> writer_failed_{false};
};

}  // namespace walrelay::relay
