// Issue 10's mixed fault run: every way off the happy path in one run of the `walrelay run`
// process against the dev broker process (walrelay-devbroker, librdkafka's mock cluster
// over loopback): a partitioned outbox with a mixed-case partition, a poison row for a
// topic that does not exist, a table-less event whose content is not UTF-8, a row larger
// than Kafka accepts, a 20 s outage of every broker (longer than request.timeout.ms), and
// kill -9 of the relay. Every valid event must arrive once or more, in order per
// aggregate; every invalid one must be in the dead-letter table with its reason.
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <signal.h>

#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "base/lsn.h"
#include "tests/kafka/test_consumer.h"
#include "tests/support/pg_cluster.h"
#include "tests/support/piped_child.h"
#include "tests/support/slot_wait.h"
#include "tests/support/subprocess.h"

namespace walrelay::relay {
namespace {

using namespace std::chrono_literals;
using kafka::testing::ConsumedRecord;
using testing::PipedChild;
using testing::Subprocess;

constexpr int kPartitions = 12;
constexpr int kTransactions = 400;
constexpr int kRowsPerTransaction = 10;
constexpr int kEvents = kTransactions * kRowsPerTransaction;

class FaultMixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pg = testing::TestCluster::Start();
    ASSERT_TRUE(pg.ok()) << pg.status().ToString();
    pg_ = std::move(*pg);
    // A time-partitioned outbox whose partition has a mixed-case name.
    ASSERT_TRUE(pg_->Exec("CREATE TABLE pouts (id bigint GENERATED ALWAYS AS IDENTITY, event_id "
                          "uuid NOT NULL DEFAULT gen_random_uuid(), aggregate_type text, "
                          "aggregate_id text NOT NULL, topic text, event_type text NOT NULL, "
                          "payload jsonb NOT NULL, headers jsonb, created_at timestamptz NOT "
                          "NULL DEFAULT now(), PRIMARY KEY (id, created_at)) PARTITION BY RANGE "
                          "(created_at);"
                          "CREATE TABLE \"Pouts_Now\" PARTITION OF pouts FOR VALUES FROM "
                          "('2000-01-01') TO ('2200-01-01');")
                    .ok());
    ASSERT_TRUE(broker_.Start({WALRELAY_DEVBROKER_PATH, "--brokers", "3", "--topic",
                               "outbox.payment:" + std::to_string(kPartitions)}));
    const std::string line = broker_.ReadLine();
    ASSERT_EQ(line.rfind("bootstrap=", 0), 0u) << line;
    bootstraps_ = line.substr(10);
    // The mock would auto-create any topic: make this one missing, as on a real cluster
    // with auto.create.topics.enable=false.
    ASSERT_EQ(broker_.Command("topic-error no.such.topic UNKNOWN_TOPIC_OR_PART"), "ok");
    log_ = pg_->socket_dir() + "/relay.log";
  }

  void StartRelay() {
    auto p = Subprocess::Start(
        {WALRELAY_BINARY, "run", "--source-dsn", pg_->conninfo(), "--source-table", "public.pouts",
         "--kafka-bootstrap-servers", bootstraps_, "--flow-status-interval-ms", "100",
         "--flow-reconnect-min-ms", "50", "--flow-reconnect-max-ms", "1000",
         "--kafka-topic-error-timeout-ms", "3000", "--source-message-prefix", "walrelay.outbox"},
        log_);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    relay_.emplace(std::move(*p));
    // Events written before the slot exists are not in its stream: wait until it streams.
    ASSERT_EQ(testing::WaitForNewWalsender(*pg_, *relay_, &walsender_pid_), "");
  }

  // The valid events: kTransactions transactions of kRowsPerTransaction rows through the
  // partition root, aggregates agg-0..agg-29, payload seq increasing in commit order; the
  // three poison events are written in transactions of their own between them.
  void Write(std::atomic<int>* progress) {
    PGconn* c = PQconnectdb(pg_->conninfo().c_str());
    auto exec = [&](const std::string& sql) {
      PGresult* r = PQexec(c, sql.c_str());
      EXPECT_TRUE(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK)
          << sql.substr(0, 200) << ": " << PQresultErrorMessage(r);
      PQclear(r);
    };
    for (int t = 0; t < kTransactions; ++t) {
      const int lo = t * kRowsPerTransaction;
      exec(
          "INSERT INTO pouts (aggregate_type, aggregate_id, event_type, payload) SELECT "
          "'payment', 'agg-' || (g % 30), 'PaymentCaptured', jsonb_build_object('seq', g) "
          "FROM generate_series(" +
          std::to_string(lo) + ", " + std::to_string(lo + kRowsPerTransaction - 1) + ") g");
      if (t == 40) {  // its topic column names a topic that does not exist
        exec(
            "INSERT INTO pouts (aggregate_type, aggregate_id, topic, event_type, payload) "
            "VALUES ('payment', 'poison-topic', 'no.such.topic', 'PaymentCaptured', '{}')");
      }
      if (t == 80) {  // a table-less event whose content is not UTF-8 (nor JSON)
        exec("SELECT pg_logical_emit_message(true, 'walrelay.outbox', '\\xfffe00c3'::bytea)");
      }
      if (t == 120) {  // larger than Kafka's message.max.bytes (1,000,000)
        exec(
            "INSERT INTO pouts (aggregate_type, aggregate_id, event_type, payload) VALUES "
            "('payment', 'poison-size', 'PaymentCaptured', jsonb_build_object('blob', "
            "repeat('x', 1500000)))");
      }
      progress->store(t + 1);
      std::this_thread::sleep_for(40ms);
    }
    PQfinish(c);
  }

  std::unique_ptr<testing::TestCluster> pg_;
  PipedChild broker_;
  std::string bootstraps_;
  std::optional<Subprocess> relay_;
  std::string log_;
  std::string walsender_pid_;
};

TEST_F(FaultMixTest, EveryValidEventArrivesInOrderAndEveryPoisonIsDeadLettered) {
  StartRelay();
  std::atomic<int> progress{0};
  std::thread writer([&] { Write(&progress); });
  struct Joiner {
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{writer};

  // A 20 s outage of every broker while events keep being written.
  for (int i = 0; i < 600 && progress.load() < 60; ++i) std::this_thread::sleep_for(50ms);
  ASSERT_EQ(broker_.Command("down all"), "ok");
  std::this_thread::sleep_for(20s);
  ASSERT_EQ(broker_.Command("up all"), "ok");
  // kill -9 while the backlog drains.
  std::this_thread::sleep_for(1500ms);
  relay_->Signal(SIGKILL);
  ASSERT_EQ(relay_->Wait(10s), 128 + SIGKILL);
  StartRelay();
  writer.join();
  ASSERT_TRUE(testing::WaitConfirmedPastCurrent(*pg_, 180s)) << relay_->LogTail();

  // Every valid event once or more, in commit order per aggregate after dropping repeats.
  std::set<std::string> ids;
  std::map<std::string, int> last_seq;
  size_t scanned = 0;
  auto records = kafka::testing::ConsumeUntil(
      bootstraps_, "outbox.payment", kPartitions,
      [&](const std::vector<ConsumedRecord>& got) {
        for (; scanned < got.size(); ++scanned) ids.insert(got[scanned].Header("event_id"));
        return ids.size() >= static_cast<size_t>(kEvents);
      },
      120s);
  std::set<std::string> seen;
  for (const ConsumedRecord& r : records) {
    ASSERT_NE(r.key.rfind("poison", 0), 0u) << "a poison event was published: " << r.key;
    if (!seen.insert(r.Header("event_id")).second) continue;
    const int seq = std::stoi(r.value.substr(r.value.find(": ") + 2));
    auto [it, first] = last_seq.emplace(r.key, seq);
    if (!first) {
      EXPECT_LT(it->second, seq) << "aggregate " << r.key << " out of commit order";
      it->second = seq;
    }
  }
  if (seen.size() != static_cast<size_t>(kEvents)) {
    // Which transactions are missing (a failing run says where to look).
    std::set<int> seqs;
    for (const ConsumedRecord& r : records) {
      seqs.insert(std::stoi(r.value.substr(r.value.find(": ") + 2)));
    }
    std::string missing;
    for (int seq = 0; seq < kEvents; ++seq) {
      if (!seqs.count(seq) && seq % kRowsPerTransaction == 0) {
        missing += " t" + std::to_string(seq / kRowsPerTransaction);
      }
    }
    ADD_FAILURE() << "transactions with missing events:" << missing;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kEvents)) << "valid events lost\n"
                                                       << relay_->LogTail();

  // Every invalid event in the dead-letter table, once, with its reason.
  auto rows = pg_->Query(
      "SELECT coalesce(aggregate_id, ''), source, reason FROM walrelay_dead_letter ORDER BY "
      "commit_lsn");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  std::map<std::string, std::string> reason_by_kind;
  for (const auto& row : *rows) {
    const std::string& aggregate = *row[0];
    const std::string& source = *row[1];
    const std::string kind = aggregate == "poison-topic"        ? "topic"
                             : aggregate == "poison-size"       ? "size"
                             : source.rfind("message:", 0) == 0 ? "message"
                                                                : "other: " + aggregate;
    EXPECT_TRUE(reason_by_kind.emplace(kind, *row[2]).second) << kind << " dead-lettered twice";
  }
  ASSERT_EQ(reason_by_kind.size(), 3u) << relay_->LogTail(400);
  EXPECT_NE(reason_by_kind["topic"].find("no.such.topic"), std::string::npos)
      << reason_by_kind["topic"];
  EXPECT_NE(reason_by_kind["size"].find("too large"), std::string::npos) << reason_by_kind["size"];
  EXPECT_FALSE(reason_by_kind["message"].empty());
  std::printf(
      "%zu records for %d events (%zu repeats); dead letters: topic: %s | size: %s | "
      "message: %s\n",
      records.size(), kEvents, records.size() - seen.size(), reason_by_kind["topic"].c_str(),
      reason_by_kind["size"].c_str(), reason_by_kind["message"].c_str());
}

}  // namespace
}  // namespace walrelay::relay
