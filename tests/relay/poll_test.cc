// Poll mode (issue 15, src/relay/polling/poller.h): the polling publisher against a real
// PostgreSQL and the suite's Kafka (relay_fixture.h). What a user checks: every committed row
// arrives, no rolled-back one does, order per aggregate holds (one poller, and three
// sharded ones at once), aggregates with negative hashes are published, a poison row is
// dead-lettered after its attempts without delaying its batch-mates.
#include <libpq-fe.h>

#include <atomic>
#include <map>
#include <set>

#include "src/cli/setup.h"
#include "src/relay/polling/poller.h"
#include "src/relay/commands/republish.h"
#include "tests/relay/relay_fixture.h"

namespace walrelay::relay {
namespace {

using namespace std::chrono_literals;
using kafka::testing::ConsumedRecord;

class PollTest : public RelayTest {
 protected:
  void SetUp() override {
    RelayTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_TRUE(pg_->Exec(PollColumnsSql("public.outbox")).ok());
    ASSERT_TRUE(pg_->Exec(PollIndexSql("public.outbox", "id")).ok());
    ASSERT_TRUE(pg_->Exec(PollWaitingIndexSql("public.outbox", "aggregate_id", "id")).ok());
    config_.source_mode = SourceMode::kPoll;
    config_.poll_interval = 20ms;
  }

  // Starts the fixture's relay in poll mode and waits until it polls.
  void StartPolling() {
    relay_ = std::make_unique<Relay>(config_);
    thread_ = std::thread([this] { run_status_ = relay_->Run(); });
    for (int i = 0; i < 300 && relay_->stats().polling.load() == 0; ++i) {
      std::this_thread::sleep_for(20ms);
    }
    ASSERT_EQ(relay_->stats().polling.load(), 1) << "relay did not start polling";
  }

  uint64_t Count(const std::string& sql) {
    auto v = pg_->QueryScalar(sql);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? std::stoull(*v) : 0;
  }

  // Waits until no outbox row is unpublished.
  bool WaitAllPublished(std::chrono::milliseconds timeout) {
    for (auto until = std::chrono::steady_clock::now() + timeout;
         std::chrono::steady_clock::now() < until;) {
      if (Count("SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }

  // Writer `w`: `txs` transactions of 1..3 rows for aggregates w<w>-<k>, seq increasing
  // per aggregate in commit order; every third transaction is rolled back instead.
  // Returns the number of committed rows.
  int Write(int w, int txs) {
    PGconn* c = PQconnectdb(pg_->conninfo().c_str());
    EXPECT_EQ(PQstatus(c), CONNECTION_OK);
    int committed = 0;
    for (int t = 0; t < txs; ++t) {
      const bool rollback = t % 3 == 2;
      const int rows = 1 + t % 3;
      std::string sql = "BEGIN;";
      for (int r = 0; r < rows; ++r) {
        const int seq = t * 10 + r;
        sql += "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES "
               "('payment', 'w" +
               std::to_string(w) + "-" + std::to_string((t + r) % 7) +
               "', 'PaymentCaptured', jsonb_build_object('seq', " + std::to_string(seq) +
               ", 'rolled_back', " + (rollback ? "true" : "false") + "));";
      }
      sql += rollback ? "ROLLBACK;" : "COMMIT;";
      PGresult* res = PQexec(c, sql.c_str());
      EXPECT_EQ(PQresultStatus(res), PGRES_COMMAND_OK) << PQresultErrorMessage(res);
      PQclear(res);
      if (!rollback) committed += rows;
    }
    PQfinish(c);
    return committed;
  }

  // Every committed row exactly once (no duplicates without failures), none rolled back,
  // per-aggregate order by seq.
  void CheckDelivered(size_t expected) {
    const auto records = kafka::testing::ConsumeAll(kafka_->bootstraps(), "outbox.payment",
                                                    kPartitions, expected, 60s);
    std::set<std::string> ids;
    std::map<std::string, int> last_seq;
    for (const ConsumedRecord& r : records) {
      EXPECT_TRUE(ids.insert(r.Header("event_id")).second) << "duplicate " << r.value;
      EXPECT_EQ(r.value.find("\"rolled_back\": true"), std::string::npos) << r.value;
      const int seq = std::stoi(r.value.substr(r.value.find("\"seq\": ") + 7));
      auto [it, first] = last_seq.emplace(r.key, seq);
      if (!first) {
        EXPECT_LT(it->second, seq) << "aggregate " << r.key << " out of commit order";
        it->second = seq;
      }
    }
    EXPECT_EQ(ids.size(), expected);
    EXPECT_EQ(
        kafka::testing::EndOffsetSum(kafka_->bootstraps(), "outbox.payment", kPartitions),
        static_cast<int64_t>(expected))
        << "more records than committed rows";
  }
};

TEST_F(PollTest, ConcurrentWritersEveryCommittedRowOnceInOrderNoneRolledBack) {
  StartPolling();
  std::vector<std::thread> writers;
  std::atomic<int> committed{0};
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] { committed += Write(w, 60); });
  }
  for (auto& t : writers) t.join();
  ASSERT_TRUE(WaitAllPublished(60s)) << "rows left unpublished";
  CheckDelivered(static_cast<size_t>(committed.load()));
  EXPECT_EQ(relay_->stats().events_acked.load(), static_cast<uint64_t>(committed.load()));
  EXPECT_NE(relay_->RenderMetrics().find("walrelay_poll_rows_count"), std::string::npos);
  StopRelay();
  EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
}

TEST_F(PollTest, ShardPredicatesCoverEveryAggregateOnceOnlyWithTheMask) {
  ASSERT_TRUE(pg_->Exec("INSERT INTO outbox (aggregate_id, event_type, payload) SELECT 'agg-' "
                        "|| g, 'E', '{}' FROM generate_series(1, 500) g")
                  .ok());
  ASSERT_GT(Count("SELECT count(*) FROM outbox WHERE hashtext(aggregate_id) < 0"), 0u);
  uint64_t masked = 0, unmasked = 0;
  for (int i = 0; i < 3; ++i) {
    masked += Count("SELECT count(*) FROM outbox WHERE " +
                    PollShardPredicate("aggregate_id", PollShard{i, 3}));
    unmasked += Count("SELECT count(*) FROM outbox WHERE hashtext(aggregate_id) % 3 = " +
                      std::to_string(i));
  }
  EXPECT_EQ(masked, 500u);    // disjoint and complete
  EXPECT_LT(unmasked, 500u);  // negative hashes fall outside every unmasked shard
  EXPECT_EQ(PollShardPredicate("aggregate_id", PollShard{}), "");
  EXPECT_FALSE(ParsePollShard("3/3").ok());
  EXPECT_FALSE(ParsePollShard("1").ok());
  EXPECT_FALSE(ParsePollShard("-1/2").ok());
  EXPECT_EQ(ParsePollShard("2/3")->index, 2);
}

TEST_F(PollTest, ThreeShardedPollersPublishEveryAggregateOnceInOrder) {
  std::vector<std::unique_ptr<Relay>> relays;
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    RelayConfig c = config_;
    c.poll_shard = std::to_string(i) + "/3";
    relays.push_back(std::make_unique<Relay>(c));
  }
  for (auto& r : relays) threads.emplace_back([&r] { EXPECT_TRUE(r->Run().ok()); });
  std::vector<std::thread> writers;
  std::atomic<int> committed{0};
  for (int w = 0; w < 3; ++w) {
    writers.emplace_back([&, w] { committed += Write(w, 60); });
  }
  for (auto& t : writers) t.join();
  ASSERT_TRUE(WaitAllPublished(60s));
  CheckDelivered(static_cast<size_t>(committed.load()));
  ASSERT_GT(Count("SELECT count(*) FROM outbox WHERE hashtext(aggregate_id) < 0"), 0u);
  uint64_t acked = 0;
  for (auto& r : relays) {
    EXPECT_GT(r->stats().events_acked.load(), 0u) << "a shard published nothing";
    acked += r->stats().events_acked.load();
    r->RequestStop();
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(acked, static_cast<uint64_t>(committed.load()));
}

TEST_F(PollTest, PoisonRowIsRetriedThenDeadLetteredWithoutDelayingItsBatchMates) {
  config_.poll_max_attempts = 3;
  config_.kafka_topic_error_timeout = 900ms;  // attempts 300 ms apart
  config_.allowed_topics = {"outbox.*"};
  ASSERT_TRUE(kafka_->MakeTopicMissing("outbox.missing", 1).ok());
  ASSERT_TRUE(
      pg_->Exec("INSERT INTO outbox (aggregate_type, aggregate_id, topic, event_type, payload) "
                "VALUES ('payment', 'a', 'outbox.missing', 'E', '{\"seq\": 0}'), "
                "('payment', 'b', 'forbidden', 'E', '{\"seq\": 0}'), "
                "('payment', 'c', NULL, 'E', '{\"seq\": 1}'), "
                "('payment', 'd', NULL, 'E', '{\"seq\": 2}')")
          .ok());
  StartPolling();
  // The batch-mates are published by the first poll; the row of the missing topic waits.
  for (int i = 0; i < 100 && Count("SELECT count(*) FROM outbox WHERE published_at IS NOT "
                                   "NULL AND aggregate_id IN ('c', 'd')") < 2;
       ++i) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(Count("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL AND aggregate_id "
                  "IN ('b', 'c', 'd')"),
            3u);
  // The missing topic's row failed at least once and is still waiting (on the dev broker
  // one attempt has failed by now; on Apache Kafka the batch-mates' acks take longer than
  // the 300 ms between attempts, so a second may have failed too).
  const uint64_t attempts = Count("SELECT retry_count FROM outbox WHERE aggregate_id = 'a'");
  EXPECT_GE(attempts, 1u);
  EXPECT_LT(attempts, 3u);
  auto last_error = pg_->QueryScalar("SELECT last_error FROM outbox WHERE aggregate_id = 'a'");
  ASSERT_TRUE(last_error.ok());
  EXPECT_NE(last_error->find("outbox.missing"), std::string::npos) << *last_error;
  // The forbidden topic was dead-lettered at once, the missing one after its attempts.
  ASSERT_TRUE(WaitAllPublished(30s));
  EXPECT_EQ(Count("SELECT count(*) FROM walrelay_dead_letter"), 2u);
  EXPECT_EQ(Count("SELECT count(*) FROM walrelay_dead_letter WHERE aggregate_id = 'a' AND reason "
                  "LIKE 'failed to publish 3 times%' AND slot = 'poll:walrelay'"),
            1u);
  EXPECT_EQ(Count("SELECT count(*) FROM walrelay_dead_letter WHERE aggregate_id = 'b' AND reason "
                  "LIKE '%allowed%'"),
            1u);
  EXPECT_EQ(relay_->stats().poll_failed_produces.load(), 3u);
  const auto records =
      kafka::testing::ConsumeAll(kafka_->bootstraps(), "outbox.payment", kPartitions, 2, 20s);
  EXPECT_EQ(records.size(), 2u);
}

TEST_F(PollTest, TerminatedConnectionsMidBatchLoseNothing) {
  config_.poll_batch_rows = 50;
  StartPolling();
  std::atomic<bool> done{false};
  std::atomic<int> committed{0};
  std::thread writer([&] {
    committed += Write(0, 300);
    done = true;
  });
  int kills = 0;
  while (!done.load()) {
    std::this_thread::sleep_for(150ms);
    kills += static_cast<int>(
        Count("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
              "application_name LIKE 'walrelay%' AND pid <> pg_backend_pid() AND "
              "query LIKE '%FOR UPDATE SKIP LOCKED%'"));
  }
  writer.join();
  ASSERT_TRUE(WaitAllPublished(60s));
  const std::set<std::string> ids = DistinctEventIds(committed.load(), 60s);
  EXPECT_EQ(ids.size(), static_cast<size_t>(committed.load())) << "events lost";
  std::printf("terminated %d poll connections, %lld records for %d rows\n", kills,
              static_cast<long long>(kafka::testing::EndOffsetSum(
                  kafka_->bootstraps(), "outbox.payment", kPartitions)),
              committed.load());
  EXPECT_GE(relay_->stats().restarts.load(), static_cast<uint64_t>(kills > 0 ? 1 : 0));
}

// Switching modes (docs/poll-mode.md): WAL -> poll with `walrelay setup --source-mode
// poll` (rows the WAL relay delivered before its recorded bound count as published), and
// poll -> WAL with `walrelay republish --unpublished --create-slot`: nothing lost, and only
// a few events repeat, not the table.
TEST_F(PollTest, SwitchingFromWalToPollAndBackLosesNothingAndRepeatsLittle) {
  auto setup = [&](const RelayConfig& c) {
    for (const std::string& sql : cli::SetupStatements(c, /*create_tables=*/false)) {
      ASSERT_TRUE(pg_->Exec(sql).ok()) << sql;
    }
  };
  // 1. WAL mode publishes 100 events and records its bound.
  RelayConfig wal = config_;
  wal.source_mode = SourceMode::kWal;
  std::swap(config_, wal);
  StartRelay();
  WriteEvents(0, 5, 20);
  ASSERT_TRUE(WaitConfirmedPastCurrent(30s));
  // A bound candidate ripens and is saved (every 2 s once confirmed): wait for it.
  ASSERT_TRUE(WaitBoundSaved(30s)) << "the WAL relay saved no bound";
  StopRelay();
  std::swap(config_, wal);
  // 2. To poll mode: the delivered rows are marked, the slot dropped (it would pin WAL).
  setup(config_);
  EXPECT_EQ(Count("SELECT count(*) FROM outbox WHERE published_at IS NULL"), 0u);
  ASSERT_TRUE(pg_->Exec("SELECT pg_drop_replication_slot('walrelay')").ok());
  StartPolling();
  WriteEvents(100, 5, 10);
  ASSERT_TRUE(WaitAllPublished(30s));
  StopRelay();
  // 3. Back to WAL mode: rows written while nothing runs are published by republish
  // --unpublished --create-slot, later ones streamed from the new slot.
  WriteEvents(150, 3, 10);
  RepublishRequest request;
  request.rows = RepublishRequest::Rows::kUnpublished;
  request.create_slot = true;
  auto republished = Republish(wal, request);
  ASSERT_TRUE(republished.ok()) << republished.status().ToString();
  EXPECT_EQ(republished->rows.published, 30u);
  std::swap(config_, wal);
  StartRelay();
  WriteEvents(180, 2, 10);
  ASSERT_TRUE(WaitConfirmedPastCurrent(30s));
  StopRelay();
  EXPECT_EQ(DistinctEventIds(200, 30s).size(), 200u) << "events lost";
  const int64_t records =
      kafka::testing::EndOffsetSum(kafka_->bootstraps(), "outbox.payment", kPartitions);
  std::printf("200 events, %lld records\n", static_cast<long long>(records));
  EXPECT_LE(records, 200 + 20) << "the switches repeated more than their last moments";
}

// A broker outage is waited out inside the poll: nothing is marked published before Kafka
// acknowledged it, and everything is once the brokers are back.
TEST_F(PollTest, BrokersDownMarksNothingUntilTheyAreBack) {
  StartPolling();
  WriteEvents(0, 2, 10);
  ASSERT_TRUE(WaitAllPublished(30s));
  ASSERT_TRUE(kafka_->SetAllBrokersDown().ok());
  WriteEvents(20, 3, 10);
  std::this_thread::sleep_for(2s);
  EXPECT_EQ(Count("SELECT count(*) FROM outbox WHERE published_at IS NULL"), 30u)
      << "rows marked published while no broker could acknowledge them";
  ASSERT_TRUE(kafka_->SetAllBrokersUp().ok());
  ASSERT_TRUE(WaitAllPublished(60s));
  EXPECT_EQ(DistinctEventIds(50, 30s).size(), 50u);
}

// The janitor in poll mode deletes rows once they are published and older than the
// retention, and never an unpublished one.
TEST_F(PollTest, JanitorDeletesOnlyPublishedRows) {
  config_.outbox_retention = 1ms;
  config_.janitor_interval = 100ms;
  ASSERT_TRUE(kafka_->MakeTopicMissing("outbox.missing", 1).ok());
  config_.kafka_topic_error_timeout = 600s;  // the missing topic's row stays unpublished
  ASSERT_TRUE(
      pg_->Exec("INSERT INTO outbox (aggregate_type, aggregate_id, topic, event_type, payload) "
                "VALUES ('payment', 'a', 'outbox.missing', 'E', '{}')")
          .ok());
  StartPolling();
  WriteEvents(0, 4, 25);
  for (int i = 0; i < 300 && Count("SELECT count(*) FROM outbox") > 1; ++i) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(Count("SELECT count(*) FROM outbox"), 1u);
  EXPECT_EQ(Count("SELECT count(*) FROM outbox WHERE aggregate_id = 'a' AND published_at IS NULL"),
            1u);
  EXPECT_EQ(DistinctEventIds(100, 30s).size(), 100u);
}

// Issue 27, item 1: in a partitioned outbox every partition has rows at (0,1), (0,2), ...,
// so a row is named by (tableoid, ctid). A list-partitioned table the user made, 500 rows
// in each partition, polled in batches of 50 after `walrelay setup --source-mode poll` on
// it (item 7: its indexes cannot be built concurrently): all 1,000 events arrive, once.
// Before the fix a batch of one partition also marked the rows at the same ctids of the
// other as published, and 500 were never produced.
TEST_F(PollTest, ListPartitionedOutboxPublishesEveryRowOfEveryPartition) {
  ASSERT_TRUE(
      pg_->Exec("CREATE TABLE public.pout (id bigint GENERATED ALWAYS AS IDENTITY, event_id uuid "
                "NOT NULL DEFAULT gen_random_uuid(), aggregate_type text, aggregate_id text NOT "
                "NULL, topic text, event_type text NOT NULL, payload jsonb NOT NULL, headers "
                "jsonb, created_at timestamptz NOT NULL DEFAULT now(), region text NOT NULL, "
                "PRIMARY KEY (id, region)) PARTITION BY LIST (region);"
                "CREATE TABLE public.pout_eu PARTITION OF public.pout FOR VALUES IN ('eu');"
                "CREATE TABLE public.pout_us PARTITION OF public.pout FOR VALUES IN ('us')")
          .ok());
  config_.tables = {"public.pout"};
  config_.poll_batch_rows = 50;
  Status setup = cli::RunSetup(config_, /*create_tables=*/true, /*dry_run=*/false);
  ASSERT_TRUE(setup.ok()) << setup.ToString();
  for (const char* index : {"pout_unpublished", "pout_waiting"}) {
    EXPECT_EQ(Count("SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                    "WHERE c.relname = '" + std::string(index) + "'"),
              1u)
        << index;
  }
  for (const auto& [region, first] : {std::pair{"eu", 0}, std::pair{"us", 500}}) {
    ASSERT_TRUE(pg_->Exec("INSERT INTO pout (aggregate_type, aggregate_id, event_type, payload, "
                          "region) SELECT 'payment', 'agg-' || (g % 20), 'E', "
                          "jsonb_build_object('seq', g), '" +
                          std::string(region) + "' FROM generate_series(" +
                          std::to_string(first) + ", " + std::to_string(first + 499) + ") g")
                    .ok());
  }
  StartPolling();
  for (int i = 0; i < 600 && Count("SELECT count(*) FROM pout WHERE published_at IS NULL") > 0;
       ++i) {
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(Count("SELECT count(*) FROM pout WHERE published_at IS NULL"), 0u);
  const std::set<std::string> ids = DistinctEventIds(1000, 30s);
  EXPECT_EQ(ids.size(), 1000u) << "rows marked published without being produced";
  EXPECT_EQ(Count("SELECT count(*) FROM pout WHERE event_id::text = ANY('{" +
                  [&] {
                    std::string list;
                    for (const std::string& id : ids) list += (list.empty() ? "" : ",") + id;
                    return list;
                  }() +
                  "}'::text[])"),
            1000u)
      << "the events that arrived are not the table's";
  EXPECT_EQ(relay_->stats().events_acked.load(), 1000u);
}

// Issue 27, item 5: a row whose topic is missing waits for its retry; the later rows of
// its aggregate wait with it (other aggregates flow), so the consumer sees the aggregate
// in id order once the topic exists. Before the fix the second event was published first.
TEST_F(PollTest, RowWaitingForItsTopicHoldsBackTheLaterRowsOfItsAggregate) {
  config_.poll_max_attempts = 100;
  config_.kafka_topic_error_timeout = 300s;  // a failed row is retried 3 s later
  ASSERT_TRUE(kafka_->MakeTopicMissing("outbox.late", 1).ok());
  auto insert = [&](const char* aggregate, int seq) {
    ASSERT_TRUE(pg_->Exec("INSERT INTO outbox (aggregate_type, aggregate_id, topic, event_type, "
                          "payload) VALUES ('payment', '" +
                          std::string(aggregate) + "', 'outbox.late', 'E', '{\"seq\": " +
                          std::to_string(seq) + "}')")
                    .ok());
  };
  insert("x", 1);
  StartPolling();
  for (int i = 0; i < 250 && Count("SELECT retry_count FROM outbox WHERE aggregate_id = 'x'") < 1;
       ++i) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(Count("SELECT retry_count FROM outbox WHERE aggregate_id = 'x'"), 1u);
  ASSERT_TRUE(kafka_->TopicAppears("outbox.late").ok());
  insert("x", 2);
  insert("y", 3);
  for (int i = 0; i < 100 && Count("SELECT count(*) FROM outbox WHERE aggregate_id = 'y' AND "
                                   "published_at IS NOT NULL") == 0;
       ++i) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(Count("SELECT count(*) FROM outbox WHERE aggregate_id = 'y' AND published_at IS NOT "
                  "NULL"),
            1u)
      << "another aggregate was held back";
  EXPECT_EQ(Count("SELECT count(*) FROM outbox WHERE published_at IS NULL"), 2u)
      << "x's second event was published while its first waits for its retry";
  ASSERT_TRUE(WaitAllPublished(30s));
  const auto records = kafka::testing::ConsumeAll(kafka_->bootstraps(), "outbox.late", 1, 3, 20s);
  std::vector<std::string> order;
  for (const ConsumedRecord& r : records) order.push_back(r.key + ":" + r.value);
  EXPECT_EQ(order, (std::vector<std::string>{"y:{\"seq\": 3}", "x:{\"seq\": 1}",
                                             "x:{\"seq\": 2}"}));
  EXPECT_EQ(relay_->stats().poll_failed_produces.load(), 1u) << "the held row counted attempts";
}

TEST_F(PollTest, TablesWithoutThePollColumnsAreRefusedWithTheFix) {
  ASSERT_TRUE(pg_->Exec(OutboxTableDdl("public.plain")).ok());
  config_.tables = {"public.plain"};
  Relay relay(config_);
  Status st = relay.Run();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("walrelay setup --source-mode poll"), std::string::npos)
      << st.ToString();
}

}  // namespace
}  // namespace walrelay::relay
