// `walrelay audit` against a relay on the dev broker: clean when everything arrived, and
// each misbehaviour found with the right event ids (issue 44): a row never published
// (missing), a record of a row that never committed (phantom), a second copy (duplicated),
// a first delivery below its key's previous position (out of order).
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <simdjson.h>

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "tests/audit/audit_harness.h"
#include "tests/support/pg_cluster.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_broker.h"

namespace walrelay {
namespace {

using namespace std::chrono_literals;
using testing::CommandResult;
using testing::Samples;
using testing::Walrelay;

// Produces one record with the relay's two headers, as something other than the relay.
// `timestamp_ms` 0: the producer's clock.
void Produce(const std::string& bootstrap, const std::string& topic, const std::string& key,
             const std::string& event_id, const std::string& position, int64_t timestamp_ms = 0) {
  char err[256];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "partitioner", "murmur2_random", err, sizeof err);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  ASSERT_NE(rk, nullptr) << err;
  rd_kafka_headers_t* h = rd_kafka_headers_new(2);
  rd_kafka_header_add(h, "event_id", -1, event_id.data(), static_cast<ssize_t>(event_id.size()));
  rd_kafka_header_add(h, "walrelay.position", -1, position.data(), static_cast<ssize_t>(position.size()));
  const std::string value = "{}";
  rd_kafka_resp_err_t e = rd_kafka_producev(
      rk, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_KEY(key.data(), key.size()),
      RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()), RD_KAFKA_V_HEADERS(h),
      RD_KAFKA_V_TIMESTAMP(timestamp_ms),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
  ASSERT_EQ(e, RD_KAFKA_RESP_ERR_NO_ERROR) << rd_kafka_err2str(e);
  ASSERT_EQ(rd_kafka_flush(rk, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_destroy(rk);
}

class AuditTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pg = testing::TestCluster::Start();
    ASSERT_TRUE(pg.ok()) << pg.status().ToString();
    pg_ = std::move(*pg);
    auto broker = testing::TestBroker::Create(1);
    ASSERT_TRUE(broker.ok()) << broker.status().ToString();
    broker_ = std::move(*broker);
    ASSERT_TRUE(broker_->CreateTopic("outbox.order", 3).ok());
    dsn_ = "--source-dsn \"" + pg_->conninfo() + "\"";
    ASSERT_EQ(Walrelay("setup --create-tables " + dsn_).code, 0);
  }

  void StartRelay() {
    auto p = testing::Subprocess::Start(
        {WALRELAY_BINARY, "run", "--source-dsn", pg_->conninfo(), "--kafka-bootstrap-servers",
         broker_->bootstraps()},
        pg_->socket_dir() + "/relay.log");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    relay_.emplace(std::move(*p));
  }
  void StopRelay() {
    relay_->Signal(SIGTERM);
    ASSERT_EQ(relay_->Wait(30s).value_or(-1), 0);
    relay_.reset();
  }

  // The audit's JSON report, parsed; its exit code in *code.
  simdjson::dom::element Audit(int* code, const std::string& extra = "") {
    CommandResult r = Walrelay("audit " + dsn_ + " --kafka-bootstrap-servers " +
                               broker_->bootstraps() + " --topic outbox.order --grace 0s --json " + extra);
    *code = r.code;
    last_json_ = r.out;
    auto doc = parser_.parse(last_json_);
    EXPECT_FALSE(doc.error()) << "exit " << r.code << ", stdout: " << r.out << "\nstderr: " << r.err;
    return doc.value_unsafe();
  }
  std::string Scalar(const std::string& sql) {
    auto v = pg_->QueryScalar(sql);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : "?";
  }
  std::string InsertRow(const std::string& aggregate) {
    return Scalar("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES "
                  "('order', '" + aggregate + "', 'created', '{}') RETURNING event_id");
  }

  std::unique_ptr<testing::TestCluster> pg_;
  std::unique_ptr<testing::TestBroker> broker_;
  std::optional<testing::Subprocess> relay_;
  std::string dsn_, last_json_;
  simdjson::dom::parser parser_;
};

TEST_F(AuditTest, CleanWhenEverythingArrivedThenFindsEachMisbehaviourByEventId) {
  StartRelay();
  ASSERT_TRUE(pg_->Exec("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) "
                        "SELECT 'order', 'o' || (g % 7), 'created', '{}' FROM generate_series(1, 300) g")
                  .ok());
  // Clean once the relay has published everything (the audit itself is the check).
  int code = -1;
  simdjson::dom::element report;
  for (int i = 0; i < 60; ++i) {
    report = Audit(&code);
    if (code == 0) break;
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_EQ(code, 0) << last_json_;
  // The premise: the window held the 300 rows and all 300 records were read.
  EXPECT_EQ(uint64_t(report["reference_rows"]), 300u);
  EXPECT_EQ(uint64_t(report["delivered_rows"]), 300u);
  EXPECT_EQ(uint64_t(report["records_read"]), 300u);
  EXPECT_EQ(uint64_t(report["missing"]["count"]), 0u);
  EXPECT_EQ(uint64_t(report["duplicated"]["count"]), 0u);
  StopRelay();

  // Misbehaviours, each with its own event id. (The phantom's position is above its key's
  // records, so that it is a phantom only, not also out of order.)
  const std::string missing = InsertRow("o1");  // committed; no relay publishes it
  const std::string phantom = "00000000-0000-4000-8000-00000000beef";
  const std::string now_us = Scalar("SELECT (extract(epoch FROM now()) * 1000000)::bigint");
  Produce(broker_->bootstraps(), "outbox.order", "o2", phantom,
          "lsn=FE/10;ordinal=0;xid=1;commit_time_us=" + now_us + ";source=public.outbox");
  const std::string repeated = Scalar("SELECT event_id FROM outbox WHERE aggregate_id = 'o3' ORDER BY id LIMIT 1");
  Produce(broker_->bootstraps(), "outbox.order", "o3", repeated,
          "lsn=0/20;ordinal=0;xid=2;commit_time_us=" + now_us + ";source=public.outbox");
  // Two rows of a new aggregate delivered in the wrong order: the later one first.
  const std::string first = InsertRow("oz");
  const std::string second = InsertRow("oz");
  Produce(broker_->bootstraps(), "outbox.order", "oz", second,
          "lsn=FF/200;ordinal=0;xid=4;commit_time_us=" + now_us + ";source=public.outbox");
  Produce(broker_->bootstraps(), "outbox.order", "oz", first,
          "lsn=FF/100;ordinal=0;xid=3;commit_time_us=" + now_us + ";source=public.outbox");

  // A second copy of another event, produced two hours after its first: an inbox keeping
  // event ids for an hour would apply it twice.
  const std::string far = Scalar("SELECT event_id FROM outbox WHERE aggregate_id = 'o4' ORDER BY id LIMIT 1");
  const int64_t later_ms = std::stoll(now_us) / 1000 + 2 * 3600 * 1000;
  Produce(broker_->bootstraps(), "outbox.order", "o4", far,
          "lsn=0/30;ordinal=0;xid=5;commit_time_us=" + now_us + ";source=public.outbox", later_ms);

  report = Audit(&code, "--inbox-retention 1h");
  EXPECT_EQ(code, 1) << last_json_;
  EXPECT_EQ(uint64_t(report["reference_rows"]), 303u);
  EXPECT_EQ(Samples(report, "missing"), std::vector<std::string>{missing}) << last_json_;
  EXPECT_EQ(Samples(report, "phantom"), std::vector<std::string>{phantom}) << last_json_;
  std::vector<std::string> duplicated{repeated, far};
  std::sort(duplicated.begin(), duplicated.end());
  EXPECT_EQ(Samples(report, "duplicated"), duplicated) << last_json_;
  EXPECT_EQ(uint64_t(report["duplicate_copies"]), 2u);
  EXPECT_EQ(Samples(report, "duplicated_beyond_inbox_retention"), std::vector<std::string>{far})
      << last_json_;
  EXPECT_EQ(Samples(report, "out_of_order"), std::vector<std::string>{first}) << last_json_;
  // The missing row's transaction delivered nothing: missing, not torn.
  EXPECT_EQ(uint64_t(report["torn"]["count"]), 0u);
}

// The audit reads its window through the created_at index setup makes: one made by
// --create-tables, said missing on a table without it, and made by `setup --audit-index`.
TEST_F(AuditTest, ATableWithoutTheCreatedAtIndexIsSaidAndSetupAuditIndexMakesIt) {
  auto tables_scanned_whole = [this] {
    int code = -1;
    simdjson::dom::element report = Audit(&code);
    EXPECT_EQ(code, 0) << last_json_;
    std::vector<std::string> out;
    for (auto t : report["tables_scanned_whole"].get_array()) out.emplace_back(std::string_view(t.get_string()));
    return out;
  };
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_indexes WHERE indexname = 'outbox_created_at'"), "1");
  EXPECT_EQ(tables_scanned_whole(), std::vector<std::string>{});
  ASSERT_TRUE(pg_->Exec("DROP INDEX outbox_created_at").ok());
  EXPECT_EQ(tables_scanned_whole(), std::vector<std::string>{"outbox"});
  CommandResult plain = Walrelay("setup " + dsn_);  // an existing table: left as it is
  ASSERT_EQ(plain.code, 0);
  EXPECT_EQ(tables_scanned_whole(), std::vector<std::string>{"outbox"});
  ASSERT_EQ(Walrelay("setup --audit-index " + dsn_).code, 0);
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_indexes WHERE indexname = 'outbox_created_at'"), "1");
  EXPECT_EQ(tables_scanned_whole(), std::vector<std::string>{});
}

TEST_F(AuditTest, BadOptionsAndAWindowPastTheJanitorsRetentionAreRefused) {
  CommandResult r = Walrelay("audit " + dsn_ + " --kafka-bootstrap-servers " + broker_->bootstraps() +
                             " --topic outbox.order --since 2d --janitor-retention 1d");
  EXPECT_EQ(r.code, 2);
  r = Walrelay("audit " + dsn_ + " --kafka-bootstrap-servers " + broker_->bootstraps() +
               " --topic outbox.order --since soon");
  EXPECT_EQ(r.code, 2);
}

// The sidecar (--every): each run's findings as gauges; a row that stays unpublished shows
// as walrelay_audit_missing_events 1, and /readyz says the last run completed.
TEST_F(AuditTest, SidecarExportsTheLastRunsFindingsAsMetrics) {
  const std::string missing = InsertRow("o1");  // no relay runs: it is never published
  const std::string log = pg_->socket_dir() + "/audit-sidecar.log";
  auto p = testing::Subprocess::Start(
      {WALRELAY_BINARY, "audit", "--source-dsn", pg_->conninfo(), "--kafka-bootstrap-servers",
       broker_->bootstraps(), "--topic", "outbox.order", "--grace", "0s", "--every", "1s",
       "--metrics-address", "127.0.0.1:0"},
      log);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  int port = 0;
  std::string body;
  for (int i = 0; i < 100; ++i) {
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    std::smatch m;
    const std::string text = ss.str();
    if (port == 0 && std::regex_search(text, m, std::regex(R"(metrics on http://127\.0\.0\.1:(\d+)/)"))) {
      port = std::stoi(m[1]);
    }
    if (port != 0) {
      httplib::Client client("127.0.0.1", port);
      auto r = client.Get("/metrics");
      if (r && r->body.find("walrelay_audit_runs_total 1") != std::string::npos) {
        body = r->body;
        break;
      }
    }
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_NE(port, 0) << "no metrics address in the log";
  ASSERT_FALSE(body.empty()) << "no completed run in the metrics";
  EXPECT_NE(body.find("walrelay_audit_missing_events 1\n"), std::string::npos) << body;
  EXPECT_NE(body.find("walrelay_audit_window_rows 1\n"), std::string::npos) << body;
  EXPECT_NE(body.find("walrelay_audit_phantom_events 0\n"), std::string::npos) << body;
  httplib::Client client("127.0.0.1", port);
  auto ready = client.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  p->Signal(SIGTERM);
  EXPECT_EQ(p->Wait(10s).value_or(-1), 0);
  EXPECT_NE(testing::ReadFile(log).find(missing), std::string::npos);
}

}  // namespace
}  // namespace walrelay
