// Scenario 6 of the network faults (issue 45): the inbox library cut off from its database
// and from Kafka by Toxiproxy (tests/support/toxiproxy.h) while it applies a topic of
// payments with the example ledger handler (src/inbox/examples/ledger.h), on the real
// PostgreSQL and the Apache Kafka cluster. Part of the network_fault_test program: it
// shares its cluster and its Toxiproxy server.
//
// What a user checks, from outside: every event applied exactly once (one wallet_credit
// row per event id and every balance exact), no partition stalled for ever once the path
// is back, and the group's committed offsets never past a record whose effect is not
// committed (sampled throughout, the fault included). Each test shows its fault was in
// place (the proxy's toxics) and that the inbox stopped applying during it before it judges.
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "src/inbox/examples/ledger.h"
#include "src/inbox/inbox.h"
#include "tests/inbox/inbox_test_util.h"
#include "tests/support/apache_kafka.h"
#include "tests/support/pg_cluster.h"
#include "tests/support/toxiproxy.h"

namespace walrelay::inbox {
namespace {

using namespace std::chrono_literals;
using testing::Event;
using testing::FastGroupProperties;
using testing::Payment;
using testing::QueryInt;
using testing::WaitFor;
using walrelay::testing::ApacheKafka;
using walrelay::testing::TestCluster;
using walrelay::testing::Toxiproxy;

class InboxNetworkFaultTest : public ::testing::Test {
 protected:
  static constexpr int kPartitions = 4;
  static constexpr int kEvents = 3000;

  void SetUp() override {
    if (std::string why = ApacheKafka::SkipReason(); !why.empty()) GTEST_SKIP() << why;
    auto cluster = ApacheKafka::Shared();
    ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
    kafka_ = *cluster;
    auto proxy = Toxiproxy::Shared();
    ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
    toxiproxy_ = *proxy;
    auto pg = TestCluster::Start();
    ASSERT_TRUE(pg.ok()) << pg.status().ToString();
    pg_ = std::move(pg).value();
    ASSERT_TRUE(ledger::EnsureLedgerSchema(pg_->conninfo()).ok());
    // Which records' effects are committed: written by the handler in the inbox's own
    // transaction, so a row here means the effect committed.
    ASSERT_TRUE(pg_->Exec("CREATE TABLE applied (p int, o bigint, PRIMARY KEY (p, o))").ok());
    topic_ = kafka_->UniqueTopic("inbox.net");
    ASSERT_TRUE(kafka_->CreateTopic(topic_, kPartitions).ok());
    for (int i = 0; i < kEvents; ++i) {
      events_.push_back(Payment(i));
      expected_["w" + std::to_string(i % 100)] += i + 1;
    }
    // The inbox's database connections cross a proxy; the test's own queries do not.
    pg_proxy_ = "inbox-pg-" + topic_;
    auto port = toxiproxy_->CreateProxy(pg_proxy_, "127.0.0.1:" + std::to_string(pg_->port()));
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    options_.bootstrap_servers = kafka_->bootstraps();
    options_.group_id = "ledger-" + topic_;
    options_.topics = {topic_};
    options_.properties = FastGroupProperties();
    options_.conninfo =
        "host=127.0.0.1 port=" + std::to_string(*port) + " user=walrelay dbname=postgres";
    options_.consumer_name = "ledger";
    options_.inbox_retention = 0ms;  // rows kept: the test counts them
    options_.batch_max_messages = 20;
    options_.retry_initial_backoff = 50ms;
    options_.retry_max_backoff = 1s;
    options_.statement_timeout = 5s;  // each wait for the database: at most 10 s
  }

  void TearDown() override {
    if (toxiproxy_ != nullptr) {
      EXPECT_TRUE(toxiproxy_->RemoveAll().ok());
    }
    if (producer_.joinable()) producer_.join();
    if (consumer_ != nullptr) {
      consumer_->Stop();
      if (runner_.joinable()) runner_.join();
    }
  }

  // Produces the events, straight to the brokers, paced over about 30 s (a writer running
  // throughout: the inbox cannot have fetched what a fault keeps from it).
  void StartProducing() {
    producer_ = std::thread([this] {
      kafka::ProducerOptions opt;
      opt.properties = {{"bootstrap.servers", kafka_->bootstraps()}, {"linger.ms", "5"}};
      auto producer = kafka::Producer::Create(
          opt, [this](uint64_t, const Status& st, const kafka::DeliveredRecord&) {
            if (!st.ok()) produce_failed_ = true;
          });
      if (!producer.ok()) {
        produce_failed_ = true;
        return;
      }
      for (size_t i = 0; i < events_.size(); ++i) {
        const Event& e = events_[i];
        const std::vector<kafka::Header> headers = {{"event_type", "payment"},
                                                    {"event_id", e.event_id}};
        if (!(*producer)->Produce(topic_, e.key, e.value, headers, i).ok()) {
          produce_failed_ = true;
        }
        std::this_thread::sleep_for(10ms);
      }
      if (!(*producer)->Flush(60s).ok()) produce_failed_ = true;
    });
  }

  void StopProducing() {
    if (producer_.joinable()) producer_.join();
    EXPECT_FALSE(produce_failed_.load()) << "the test's producer failed";
  }

  // Starts the inbox with the ledger handler, slowed so that faults land mid-stream, and
  // writing (partition, offset) beside each credit.
  void StartInbox() {
    Handler handler = [](const InboxMessage& m, Transaction& tx) -> Status {
      std::this_thread::sleep_for(2ms);
      WALRELAY_RETURN_IF_ERROR(ledger::CreditWallet(m, tx));
      return tx.Exec("INSERT INTO applied VALUES ($1, $2)", {m.partition, m.offset}).status();
    };
    auto c = InboxConsumer::Create(options_, handler);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    consumer_ = std::move(*c);
    ASSERT_TRUE(consumer_->EnsureSchema().ok());
    runner_ = std::thread([this] { run_status_ = consumer_->Run(); });
  }

  int64_t Applied() { return QueryInt(*pg_, "SELECT count(*) FROM applied"); }

  // The group's committed offset of each partition (-1: none), as a new client of the
  // group reads it from the coordinator (it joins nothing).
  std::map<int, int64_t> Committed() {
    std::map<int, int64_t> out;
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", kafka_->bootstraps().c_str(), err, sizeof err);
    rd_kafka_conf_set(conf, "group.id", options_.group_id.c_str(), err, sizeof err);
    rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (rk == nullptr) {
      ADD_FAILURE() << err;
      return out;
    }
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(kPartitions);
    for (int p = 0; p < kPartitions; ++p) rd_kafka_topic_partition_list_add(list, topic_.c_str(), p);
    const rd_kafka_resp_err_t e = rd_kafka_committed(rk, list, 10000);
    EXPECT_EQ(e, RD_KAFKA_RESP_ERR_NO_ERROR) << rd_kafka_err2str(e);
    for (int i = 0; i < list->cnt; ++i) out[list->elems[i].partition] = list->elems[i].offset;
    rd_kafka_topic_partition_list_destroy(list);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return out;
  }

  // The group's committed offsets never lie past a record whose effect is uncommitted:
  // each partition's committed offset is at most one past its highest applied offset,
  // and every offset below it is applied (read after the offsets: applied rows only grow).
  void ExpectCommittedOnlyWhatIsApplied(const char* when) {
    const std::map<int, int64_t> committed = Committed();
    for (const auto& [p, offset] : committed) {
      if (offset < 0) continue;
      const int64_t below = QueryInt(*pg_, "SELECT count(*) FROM applied WHERE p = " +
                                               std::to_string(p) + " AND o < " + std::to_string(offset));
      EXPECT_EQ(below, offset) << when << ": partition " << p << " committed at offset " << offset
                               << " with only " << below << " records below it applied";
    }
    ++offset_checks_;
  }

  // Waits for every event (`within`), stops the inbox and judges: each event applied once,
  // every balance exact, and the committed offsets at the end of every partition.
  void ExpectEverythingAppliedOnce(std::chrono::seconds within) {
    StopProducing();
    const bool all = WaitFor([&] { return Applied() >= kEvents; }, within);
    consumer_->Stop();
    runner_.join();
    ASSERT_TRUE(all) << Applied() << " of " << kEvents << " applied " << within.count()
                     << " s after the path came back: a partition stalled";
    EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
    EXPECT_EQ(QueryInt(*pg_, "SELECT count(*) FROM wallet_credit"), kEvents);
    EXPECT_EQ(QueryInt(*pg_, "SELECT count(DISTINCT event_id) FROM wallet_credit"), kEvents);
    EXPECT_EQ(Applied(), kEvents);
    auto rows = pg_->Query("SELECT id, balance FROM wallet ORDER BY id");
    ASSERT_TRUE(rows.ok());
    ASSERT_EQ(rows->size(), expected_.size());
    for (const auto& row : *rows) EXPECT_EQ(std::stoll(*row[1]), expected_[*row[0]]) << *row[0];
    ExpectCommittedOnlyWhatIsApplied("after the stop");
    int64_t committed_total = 0;
    for (const auto& [p, offset] : Committed()) committed_total += std::max<int64_t>(offset, 0);
    EXPECT_EQ(committed_total, kEvents) << "a clean stop commits every applied record's offset";
  }

  ApacheKafka* kafka_ = nullptr;
  Toxiproxy* toxiproxy_ = nullptr;
  std::unique_ptr<TestCluster> pg_;
  std::string topic_, pg_proxy_;
  std::vector<Event> events_;
  std::map<std::string, int64_t> expected_;
  InboxOptions options_;
  std::unique_ptr<InboxConsumer> consumer_;
  std::thread runner_, producer_;
  std::atomic<bool> produce_failed_{false};
  Status run_status_;
  int offset_checks_ = 0;
};

// 6a. Inbox <-> database black hole (no RST, no FIN) for 25 s while it applies. Every
// worker waiting for an answer gives up within statement_timeout + 5 s (10 s here) and
// retries on a new connection (connects into the black hole end at connect_timeout);
// nothing commits meanwhile, so no offset moves; once the path is back every partition
// goes on, and nothing is applied twice.
TEST_F(InboxNetworkFaultTest, DatabaseBlackHoleStallsNoPartitionAndAppliesNothingTwice) {
  ASSERT_NO_FATAL_FAILURE(StartInbox());
  StartProducing();
  ASSERT_TRUE(WaitFor([&] { return Applied() > 300; }, 60s)) << "the inbox was not applying";
  ASSERT_TRUE(toxiproxy_->BlackHole(pg_proxy_).ok());
  const auto fault_at = std::chrono::steady_clock::now();
  auto toxics = toxiproxy_->Describe(pg_proxy_);
  ASSERT_TRUE(toxics.ok());
  ASSERT_NE(toxics->find("black_hole_down"), std::string::npos) << *toxics;
  const uint64_t retries_before = consumer_->stats().retries;
  std::this_thread::sleep_for(1s);  // what was committing when the hole opened has landed
  const int64_t applied_in_hole = Applied();
  ASSERT_LT(applied_in_hole, kEvents) << "everything was applied before the fault";

  // Noticed: the workers' waits end (transient failures, retried) within the bound.
  while (consumer_->stats().retries == retries_before &&
         std::chrono::steady_clock::now() - fault_at < 20s) {
    std::this_thread::sleep_for(100ms);
  }
  const auto noticed_after = std::chrono::steady_clock::now() - fault_at;
  ASSERT_GT(consumer_->stats().retries, retries_before)
      << "no worker gave up waiting for the database in 20 s: a statement waits for ever";
  EXPECT_LE(noticed_after, 12s) << "the bound is statement_timeout (5 s) + 5 s";
  while (std::chrono::steady_clock::now() - fault_at < 25s) {
    ExpectCommittedOnlyWhatIsApplied("during the black hole");
    std::this_thread::sleep_for(2s);
  }
  EXPECT_EQ(Applied(), applied_in_hole) << "effects committed through a black hole?";
  const uint64_t retries_in_hole = consumer_->stats().retries - retries_before;

  ASSERT_TRUE(toxiproxy_->Heal(pg_proxy_).ok());
  std::printf("[ info     ] noticed after %lld ms; %llu retries during the 25 s black hole\n",
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(noticed_after).count()),
              static_cast<unsigned long long>(retries_in_hole));
  ASSERT_NO_FATAL_FAILURE(ExpectEverythingAppliedOnce(90s));
  EXPECT_GE(offset_checks_, 4);
}

// 6b. Inbox <-> Kafka black hole: every broker's path cut (no RST, no FIN) for 25 s while
// it applies; the group's session times out on the coordinator meanwhile, so the inbox
// comes back to a rebalance and records whose offsets it could not commit are delivered
// again. They are absorbed (duplicates), never applied twice; every partition goes on.
TEST_F(InboxNetworkFaultTest, KafkaBlackHoleStallsNoPartitionAndAppliesNothingTwice) {
  std::string bootstraps;
  std::vector<std::string> proxies;
  for (const auto& l : kafka_->proxied_listeners()) {
    const std::string name = "kafka-" + std::to_string(l.broker);
    auto port = toxiproxy_->CreateProxy(name, "127.0.0.1:" + std::to_string(l.port), l.proxy_port);
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    proxies.push_back(name);
    bootstraps += (bootstraps.empty() ? "" : ",") + std::string("127.0.0.1:") + std::to_string(l.proxy_port);
  }
  ASSERT_EQ(static_cast<int>(proxies.size()), kafka_->brokers());
  options_.bootstrap_servers = bootstraps;
  ASSERT_NO_FATAL_FAILURE(StartInbox());
  StartProducing();
  ASSERT_TRUE(WaitFor([&] { return Applied() > 300; }, 60s)) << "the inbox was not applying";
  for (const auto& name : proxies) ASSERT_TRUE(toxiproxy_->BlackHole(name).ok());
  const auto fault_at = std::chrono::steady_clock::now();
  for (const auto& name : proxies) {
    auto toxics = toxiproxy_->Describe(name);
    ASSERT_TRUE(toxics.ok());
    ASSERT_NE(toxics->find("black_hole_down"), std::string::npos) << name << ": " << *toxics;
  }
  // What was fetched before the hole opened is applied; then nothing more arrives.
  std::this_thread::sleep_for(10s);
  const int64_t applied_in_hole = Applied();
  ASSERT_LT(applied_in_hole, kEvents) << "everything was applied before the fault";
  while (std::chrono::steady_clock::now() - fault_at < 25s) {
    ExpectCommittedOnlyWhatIsApplied("during the black hole");
    std::this_thread::sleep_for(2s);
  }
  EXPECT_EQ(Applied(), applied_in_hole) << "records arrived through a black hole?";
  for (const auto& name : proxies) ASSERT_TRUE(toxiproxy_->Heal(name).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectEverythingAppliedOnce(120s));
  std::printf("[ info     ] %llu duplicates absorbed after the black hole\n",
              static_cast<unsigned long long>(consumer_->stats().duplicates));
  EXPECT_GE(offset_checks_, 4);
}

}  // namespace
}  // namespace walrelay::inbox
