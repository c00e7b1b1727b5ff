// `walrelay audit` against Apache Kafka (scripts/kafka.sh's cluster), for what happens to
// a topic outside the relay and what only a real cluster does: the topic deleted and made
// again (its history gone), and records removed from a partition (DeleteRecords, as a
// retention mistake or an operator would). The relay did nothing wrong either time, its
// slot is confirmed past every event: only the audit can tell that consumers will never
// see them, and it must name exactly those events (issue 44).
//
// Runs with WALRELAY_TEST_KAFKA=apache (CI sets it); otherwise every test skips and says so.
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/audit/audit_harness.h"
#include "tests/support/apache_kafka.h"
#include "tests/support/pg_cluster.h"
#include "tests/support/subprocess.h"

namespace walrelay {
namespace {

using namespace std::chrono_literals;
using testing::ApacheKafka;
using testing::Samples;
using testing::Walrelay;

// Removes the records of `topic`'s partition 0 below `offset` (Kafka's DeleteRecords).
std::string DeleteRecordsBelow(const std::string& bootstrap, const std::string& topic, int64_t offset) {
  char err[256];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof err);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (rk == nullptr) return err;
  rd_kafka_topic_partition_list_t* offsets = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(offsets, topic.c_str(), 0)->offset = offset;
  rd_kafka_DeleteRecords_t* request = rd_kafka_DeleteRecords_new(offsets);
  rd_kafka_topic_partition_list_destroy(offsets);
  rd_kafka_queue_t* q = rd_kafka_queue_new(rk);
  rd_kafka_DeleteRecords(rk, &request, 1, nullptr, q);
  rd_kafka_DeleteRecords_destroy(request);
  std::string error;
  rd_kafka_event_t* ev = rd_kafka_queue_poll(q, 30000);
  if (ev == nullptr) {
    error = "DeleteRecords: no answer in 30 s";
  } else if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    error = rd_kafka_event_error_string(ev);
  } else {
    const rd_kafka_topic_partition_list_t* done =
        rd_kafka_DeleteRecords_result_offsets(rd_kafka_event_DeleteRecords_result(ev));
    if (done == nullptr || done->cnt != 1 || done->elems[0].err != RD_KAFKA_RESP_ERR_NO_ERROR ||
        done->elems[0].offset != offset) {
      error = "DeleteRecords: the partition's low watermark did not become " + std::to_string(offset);
    }
  }
  if (ev != nullptr) rd_kafka_event_destroy(ev);
  rd_kafka_queue_destroy(q);
  rd_kafka_destroy(rk);
  return error;
}

class AuditApacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = ApacheKafka::SkipReason(); !why.empty()) GTEST_SKIP() << why;
    auto cluster = ApacheKafka::Shared();
    ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
    kafka_ = *cluster;
    ASSERT_TRUE(kafka_->DeleteAllTopics().ok());
    auto pg = testing::TestCluster::Start();
    ASSERT_TRUE(pg.ok()) << pg.status().ToString();
    pg_ = std::move(*pg);
    dsn_ = "--source-dsn \"" + pg_->conninfo() + "\"";
    ASSERT_EQ(Walrelay("setup --create-tables " + dsn_).code, 0);
  }

  void StartRelay() {
    auto p = testing::Subprocess::Start(
        {WALRELAY_BINARY, "run", "--source-dsn", pg_->conninfo(), "--kafka-bootstrap-servers",
         kafka_->bootstraps()},
        pg_->socket_dir() + "/relay.log");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    relay_.emplace(std::move(*p));
  }
  void StopRelay() {
    relay_->Signal(SIGTERM);
    ASSERT_EQ(relay_->Wait(30s).value_or(-1), 0);
    relay_.reset();
  }

  // Commits `n` rows of aggregate type 'order' in one transaction; their event ids in
  // insert order.
  std::vector<std::string> Insert(int n) {
    auto joined = pg_->QueryScalar(
        "WITH i AS (INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) SELECT "
        "'order', 'o' || (g % 7), 'created', '{}' FROM generate_series(1, " + std::to_string(n) +
        ") g RETURNING id, event_id) SELECT string_agg(event_id::text, ',' ORDER BY id) FROM i");
    EXPECT_TRUE(joined.ok()) << joined.status().ToString();
    std::vector<std::string> ids;
    std::stringstream in(joined.ok() ? *joined : "");
    for (std::string id; std::getline(in, id, ',');) ids.push_back(id);
    EXPECT_EQ(static_cast<int>(ids.size()), n);
    return ids;
  }

  // Runs the audit until `done(report)` (the relay publishes meanwhile) or 30 s passed;
  // its exit code in *code.
  template <typename Done>
  simdjson::dom::element AuditUntil(int* code, Done done) {
    simdjson::dom::element report;
    for (int i = 0; i < 60; ++i) {
      testing::CommandResult r = Walrelay("audit " + dsn_ + " --kafka-bootstrap-servers " +
                                          kafka_->bootstraps() +
                                          " --topic outbox.order --grace 0s --samples 1000 --json");
      *code = r.code;
      last_json_ = r.out;
      auto doc = parser_.parse(last_json_);
      EXPECT_FALSE(doc.error()) << "exit " << r.code << ", stdout: " << r.out << "\nstderr: " << r.err;
      if (doc.error()) return report;
      report = doc.value_unsafe();
      if (done(report)) break;
      std::this_thread::sleep_for(500ms);
    }
    return report;
  }
  static std::vector<std::string> Sorted(std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  }

  ApacheKafka* kafka_ = nullptr;
  std::unique_ptr<testing::TestCluster> pg_;
  std::optional<testing::Subprocess> relay_;
  std::string dsn_, last_json_;
  simdjson::dom::parser parser_;
};

// The topic is deleted and made again while the relay is stopped (its slot confirmed past
// every event). The events published before are gone for good; the audit names each of
// them missing, and none of those published to the new topic.
TEST_F(AuditApacheTest, ATopicDeletedAndMadeAgainLeavesEveryEarlierEventMissing) {
  ASSERT_TRUE(kafka_->CreateTopic("outbox.order", 3).ok());
  StartRelay();
  const std::vector<std::string> before = Insert(200);
  int code = -1;
  simdjson::dom::element report = AuditUntil(&code, [](auto r) { return uint64_t(r["delivered_rows"]) == 200; });
  // The premise: all 200 were in Kafka, and the audit said so.
  ASSERT_EQ(code, 0) << last_json_;
  ASSERT_EQ(uint64_t(report["records_read"]), 200u) << last_json_;
  StopRelay();

  ASSERT_TRUE(kafka_->DeleteAllTopics().ok());
  ASSERT_TRUE(kafka_->CreateTopic("outbox.order", 3).ok());
  StartRelay();
  const std::vector<std::string> after = Insert(50);
  report = AuditUntil(&code, [](auto r) { return uint64_t(r["records_read"]) == 50; });
  EXPECT_EQ(code, 1) << last_json_;
  EXPECT_EQ(uint64_t(report["reference_rows"]), 250u);
  EXPECT_EQ(uint64_t(report["records_read"]), 50u) << "the new topic holds the 50 new events only";
  EXPECT_EQ(uint64_t(report["delivered_rows"]), 50u);
  EXPECT_EQ(uint64_t(report["missing"]["count"]), 200u);
  EXPECT_EQ(Sorted(Samples(report, "missing")), Sorted(before)) << last_json_;
  EXPECT_EQ(uint64_t(report["phantom"]["count"]), 0u);
  EXPECT_EQ(uint64_t(report["duplicated"]["count"]), 0u);
  StopRelay();
}

// Records below offset 30 of a one-partition topic are deleted (DeleteRecords): the first
// 30 events of the transaction, in commit order, are missing, and the transaction is torn
// (70 of its rows still readable).
TEST_F(AuditApacheTest, RecordsDeletedFromAPartitionAreMissingByEventIdAndTheirTransactionTorn) {
  ASSERT_TRUE(kafka_->CreateTopic("outbox.order", 1).ok());
  StartRelay();
  const std::vector<std::string> ids = Insert(100);
  int code = -1;
  simdjson::dom::element report = AuditUntil(&code, [](auto r) { return uint64_t(r["delivered_rows"]) == 100; });
  ASSERT_EQ(code, 0) << last_json_;
  ASSERT_EQ(uint64_t(report["records_read"]), 100u) << last_json_;
  StopRelay();

  ASSERT_EQ(DeleteRecordsBelow(kafka_->bootstraps(), "outbox.order", 30), "");
  report = AuditUntil(&code, [](auto) { return true; });
  EXPECT_EQ(code, 1) << last_json_;
  EXPECT_EQ(uint64_t(report["records_read"]), 70u);
  EXPECT_EQ(uint64_t(report["missing"]["count"]), 30u);
  EXPECT_EQ(Sorted(Samples(report, "missing")),
            Sorted(std::vector<std::string>(ids.begin(), ids.begin() + 30)))
      << last_json_;
  EXPECT_EQ(uint64_t(report["torn"]["count"]), 1u) << last_json_;
  EXPECT_EQ(uint64_t(report["out_of_order"]["count"]), 0u);
  EXPECT_EQ(uint64_t(report["phantom"]["count"]), 0u);
}

}  // namespace
}  // namespace walrelay
