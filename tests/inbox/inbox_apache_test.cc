// The inbox against Apache Kafka itself (scripts/kafka.sh: three brokers, RF 3,
// min.insync.replicas=2): what the mock cluster cannot answer or show. The retention rule
// fed by the broker's own DescribeConfigs (retention.ms, segment.ms, cleanup.policy), and
// a consumer group of two instances that keeps applying every event exactly once while
// a broker is killed under it.
//
// Runs with WALRELAY_TEST_KAFKA=apache (CI sets it); otherwise every test skips and says
// so. One cluster per program (tests/support/apache_kafka.h).
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "src/inbox/examples/ledger.h"
#include "src/inbox/inbox.h"
#include "tests/inbox/inbox_test_util.h"
#include "tests/support/apache_kafka.h"
#include "tests/support/pg_cluster.h"

namespace walrelay::inbox {
namespace {

using namespace std::chrono_literals;
using testing::Event;
using testing::FastGroupProperties;
using testing::Payment;
using testing::ProduceAll;
using testing::QueryInt;
using testing::WaitFor;
using walrelay::testing::ApacheKafka;
using walrelay::testing::TestCluster;

class InboxApacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = ApacheKafka::SkipReason(); !why.empty()) GTEST_SKIP() << why;
    auto cluster = ApacheKafka::Shared();
    ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
    kafka_ = *cluster;
    auto pg = TestCluster::Start();
    ASSERT_TRUE(pg.ok()) << pg.status().ToString();
    pg_ = std::move(pg).value();
    ASSERT_TRUE(ledger::EnsureLedgerSchema(pg_->conninfo()).ok());
  }

  void TearDown() override {
    if (kafka_ == nullptr) return;
    EXPECT_TRUE(kafka_->RestoreAll(restore_).ok());
  }

  InboxOptions Options(const std::string& group, const std::string& topic) {
    InboxOptions o;
    o.bootstrap_servers = kafka_->bootstraps();
    o.group_id = group;
    o.topics = {topic};
    o.properties = FastGroupProperties();
    o.conninfo = pg_->conninfo();
    o.consumer_name = "ledger";
    o.retry_initial_backoff = 10ms;
    o.retry_max_backoff = 200ms;
    o.replay_window = 0ms;  // only the broker's answer counts
    o.describe_configs_timeout = 10s;
    return o;
  }

  ApacheKafka* kafka_ = nullptr;
  std::unique_ptr<TestCluster> pg_;
  std::vector<std::pair<std::string, int>> restore_;
};

// 7a. The retention rule reads the topic's configuration from the broker: window =
// retention.ms + segment.ms + the broker's log.retention.check.interval.ms (Kafka's
// default, 5 minutes, when not set on the topic); a compacted topic needs rows kept for
// ever; compact,delete is bounded like delete.
TEST_F(InboxApacheTest, RetentionRuleReadsTheTopicsConfigurationFromTheBroker) {
  const std::string daily = kafka_->UniqueTopic("inbox.daily");
  ASSERT_TRUE(kafka_->CreateTopic(daily, 1, {"retention.ms=86400000", "segment.ms=3600000"}).ok());
  InboxOptions o = Options("g", daily);
  o.inbox_retention = 24h;
  auto refused = InboxConsumer::Create(o, &ledger::CreditWallet);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(
                "retention.ms 86400000 + segment.ms 3600000 + check interval 300000"),
            std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("broker configs of topic " + daily),
            std::string::npos)
      << refused.status().message();
  o.inbox_retention = 48h;
  auto accepted = InboxConsumer::Create(o, &ledger::CreditWallet);
  ASSERT_TRUE(accepted.ok()) << accepted.status().ToString();
  ASSERT_TRUE((*accepted)->replay_window().has_value());
  EXPECT_EQ((*accepted)->replay_window()->window, std::chrono::milliseconds(90'300'000));

  const std::string compacted = kafka_->UniqueTopic("inbox.compacted");
  ASSERT_TRUE(kafka_->CreateTopic(compacted, 1, {"cleanup.policy=compact"}).ok());
  o = Options("g", compacted);
  o.inbox_retention = std::chrono::hours(24 * 365);
  auto compact = InboxConsumer::Create(o, &ledger::CreditWallet);
  ASSERT_FALSE(compact.ok());
  EXPECT_NE(compact.status().message().find("is compacted (cleanup.policy=compact)"),
            std::string::npos)
      << compact.status().message();

  const std::string both = kafka_->UniqueTopic("inbox.both");
  ASSERT_TRUE(kafka_
                  ->CreateTopic(both, 1,
                                {"cleanup.policy=compact,delete", "retention.ms=86400000",
                                 "segment.ms=3600000"})
                  .ok());
  o = Options("g", both);
  o.inbox_retention = 48h;
  auto bounded = InboxConsumer::Create(o, &ledger::CreditWallet);
  ASSERT_TRUE(bounded.ok()) << bounded.status().ToString();
  EXPECT_EQ((*bounded)->replay_window()->window, std::chrono::milliseconds(90'300'000));
}

// 7b. Two ledger instances in one group; a broker is killed with -9 while they apply, and
// comes back: the group coordinator, the offsets topic and the partitions' leaders move.
// Every event is applied exactly once (counted by the effects), balances exact.
TEST_F(InboxApacheTest, TwoInstancesWithABrokerKilledApplyEveryEventOnce) {
  constexpr int kEvents = 4000;
  const std::string topic = kafka_->UniqueTopic("inbox.payments");
  ASSERT_TRUE(kafka_->CreateTopic(topic, 6).ok());
  restore_ = {{topic, 6}};
  std::vector<Event> events;
  std::map<std::string, int64_t> expected;
  for (int i = 0; i < kEvents; ++i) {
    events.push_back(Payment(i));
    expected["w" + std::to_string(i % 100)] += i + 1;
  }
  ProduceAll(kafka_->bootstraps(), topic, events);

  // The handler is slowed so that the kill lands mid-stream.
  Handler slow = [](const InboxMessage& m, Transaction& tx) -> Status {
    std::this_thread::sleep_for(1ms);
    return ledger::CreditWallet(m, tx);
  };
  std::vector<std::unique_ptr<InboxConsumer>> consumers;
  std::vector<std::thread> runners;
  std::vector<Status> results(2);
  for (int i = 0; i < 2; ++i) {
    InboxOptions o = Options("ledger-group", topic);
    o.inbox_retention = 0ms;  // rows kept: the test counts them
    auto c = InboxConsumer::Create(o, slow);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE((*c)->EnsureSchema().ok());
    consumers.push_back(std::move(*c));
  }
  for (int i = 0; i < 2; ++i) {
    runners.emplace_back([&, i] { results[i] = consumers[i]->Run(); });
  }
  ASSERT_TRUE(WaitFor([&] { return QueryInt(*pg_, "SELECT count(*) FROM wallet_credit") > 500; },
                      120s));
  ASSERT_TRUE(kafka_->KillBroker(2).ok());
  std::this_thread::sleep_for(5s);
  ASSERT_TRUE(kafka_->StartBroker(2).ok());
  const bool all = WaitFor(
      [&] { return QueryInt(*pg_, "SELECT count(*) FROM wallet_credit") >= kEvents; }, 180s);
  for (auto& c : consumers) c->Stop();
  for (auto& r : runners) r.join();
  ASSERT_TRUE(all) << QueryInt(*pg_, "SELECT count(*) FROM wallet_credit") << " of " << kEvents;
  for (const Status& st : results) EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(QueryInt(*pg_, "SELECT count(*) FROM wallet_credit"), kEvents);
  EXPECT_EQ(QueryInt(*pg_, "SELECT count(DISTINCT event_id) FROM wallet_credit"), kEvents);
  auto rows = pg_->Query("SELECT id, balance FROM wallet ORDER BY id");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), expected.size());
  for (const auto& row : *rows) EXPECT_EQ(std::stoll(*row[1]), expected[*row[0]]) << *row[0];
}

}  // namespace
}  // namespace walrelay::inbox
