// `walrelay config from-debezium` (src/cli/from_debezium.h): the six connector
// configurations of bench/debezium (the base connector.properties bench/debezium/debezium.sh
// writes, plus each scenario's lines), translated, must configure walrelay as the
// scenario's own walrelay options do (bench/debezium/scenarios/X.walrelay, which
// compare.sh showed to write Debezium's records), and name what they cannot map.
#include "src/cli/from_debezium.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <sstream>

#include "src/cli/options.h"

namespace walrelay::cli {
namespace {

std::string Read(const std::string& relative) {
  std::ifstream in(std::string(WALRELAY_SOURCE_DIR) + "/" + relative);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// As bench/debezium/debezium.sh writes it (values of a local run).
const char* const kBaseConnector =
    "name=outbox\n"
    "connector.class=io.debezium.connector.postgresql.PostgresConnector\n"
    "tasks.max=1\n"
    "database.hostname=/tmp/pg\n"
    "database.port=5432\n"
    "database.dbname=app\n"
    "database.user=walrelay\n"
    "database.password=\n"
    "topic.prefix=dbz\n"
    "plugin.name=pgoutput\n"
    "slot.name=debezium\n"
    "publication.name=dbz_publication\n"
    "publication.autocreate.mode=filtered\n"
    "table.include.list=public.outbox\n"
    "snapshot.mode=no_data\n"
    "tombstones.on.delete=false\n"
    "transforms=outbox\n"
    "transforms.outbox.type=io.debezium.transforms.outbox.EventRouter\n";

Result<relay::RelayConfig> Resolve(const std::vector<std::string>& args) {
  CLI::App app;
  RunOptionBinder binder(&app);
  std::vector<const char*> argv = {"walrelay"};
  for (const auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  return binder.Resolve(/*require_kafka=*/false);
}

TEST(FromDebeziumTest, TheBenchScenariosTranslateToTheOptionsThatReproduceDebeziumsRecords) {
  for (const char scenario : std::string("abcdef")) {
    SCOPED_TRACE(std::string("scenario ") + scenario);
    const std::string dir = std::string("bench/debezium/scenarios/") + scenario;
    auto translated = TranslateDebeziumConfig(kBaseConnector + Read(dir + ".properties"));
    ASSERT_TRUE(translated.ok()) << translated.status().ToString();
    char path[] = "/tmp/walrelay-from-debezium-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, translated->toml.data(), translated->toml.size()),
              static_cast<ssize_t>(translated->toml.size()));
    ::close(fd);
    auto ours = Resolve({"--config", path});
    ::unlink(path);
    ASSERT_TRUE(ours.ok()) << ours.status().ToString() << "\n" << translated->toml;

    // The scenario's walrelay options, as compare.sh runs them.
    std::vector<std::string> args = {"--source-dsn", "dbname=app", "--outbox-profile", "debezium", "--outbox-topic-template",
                                     "dbz.outbox.event.${aggregate_type}"};
    std::istringstream lines(Read(dir + ".walrelay"));
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty() && line[0] != '#') args.push_back(line);
    }
    auto theirs = Resolve(args);
    ASSERT_TRUE(theirs.ok()) << theirs.status().ToString();

    EXPECT_EQ(ours->key_format, theirs->key_format) << translated->toml;
    EXPECT_EQ(ours->value_format, theirs->value_format) << translated->toml;
    EXPECT_EQ(ours->topic_template, theirs->topic_template);
    EXPECT_EQ(ours->columns.event_id, theirs->columns.event_id);
    EXPECT_EQ(ours->columns.aggregate_id, theirs->columns.aggregate_id);
    EXPECT_EQ(ours->columns.aggregate_type, theirs->columns.aggregate_type);
    EXPECT_EQ(ours->columns.event_type, theirs->columns.event_type);
    EXPECT_EQ(ours->columns.payload, theirs->columns.payload);
    EXPECT_EQ(ours->header_names.event_id, theirs->header_names.event_id);
    EXPECT_EQ(ours->header_names.event_type, theirs->header_names.event_type);
    EXPECT_EQ(ours->header_names.aggregate_type, theirs->header_names.aggregate_type);
    EXPECT_EQ(ours->slot, "debezium");
    EXPECT_EQ(ours->publication, "dbz_publication");
    EXPECT_EQ(ours->tables, std::vector<std::string>{"public.outbox"});
    EXPECT_EQ(ours->source_dsn, "host=/tmp/pg port=5432 dbname=app user=walrelay");
    EXPECT_EQ(translated->toml.find("database.password ="), std::string::npos);

    // What cannot be honoured is said, with the setting: d's envelope placement and event
    // timestamp, f's tombstones (walrelay dead-letters a NULL payload).
    std::vector<std::string> expected;
    if (scenario == 'd') {
      expected = {"transforms.outbox.table.fields.additional.placement",
                  "transforms.outbox.table.field.event.timestamp"};
    } else if (scenario == 'f') {
      expected = {"transforms.outbox.route.tombstone.on.empty.payload"};
    }
    std::vector<std::string> keys;
    for (const std::string& u : translated->unmapped) keys.push_back(u.substr(0, u.find(':')));
    EXPECT_EQ(keys, expected) << translated->toml;
    for (const std::string& k : expected) {
      EXPECT_NE(translated->toml.find("# not mapped: " + k), std::string::npos) << translated->toml;
    }
  }
}

TEST(FromDebeziumTest, TheRestJsonFormIsReadAndSecretsAreNeverCopied) {
  const std::string json = R"({"name": "outbox-connector", "config": {
      "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
      "database.hostname": "db.internal", "database.port": 5432, "database.user": "dbz",
      "database.password": "hunter2-very-secret", "database.dbname": "orders",
      "slot.name": "orders_slot", "table.include.list": "public.outbox,billing.outbox",
      "heartbeat.interval.ms": "10000",
      "producer.override.compression.type": "zstd",
      "producer.override.sasl.jaas.config": "org.apache... password=\"kafka-secret-1\";",
      "transforms": "outbox", "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
      "transforms.outbox.table.field.event.key": "account_id",
      "key.converter": "org.apache.kafka.connect.storage.StringConverter",
      "value.converter": "io.confluent.connect.avro.AvroConverter"}})";
  auto t = TranslateDebeziumConfig(json);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->toml.find("hunter2"), std::string::npos) << t->toml;
  EXPECT_EQ(t->toml.find("kafka-secret-1"), std::string::npos) << t->toml;
  EXPECT_NE(t->toml.find("dsn = \"host=db.internal port=5432 dbname=orders user=dbz\""),
            std::string::npos)
      << t->toml;
  EXPECT_NE(t->toml.find("tables = [\"public.outbox\", \"billing.outbox\"]"), std::string::npos);
  EXPECT_NE(t->toml.find("aggregate_id = \"account_id\""), std::string::npos);
  EXPECT_NE(t->toml.find("heartbeat_interval_ms = 10000"), std::string::npos);
  EXPECT_NE(t->toml.find("\"compression.type\" = \"zstd\""), std::string::npos) << t->toml;
  std::string keys;
  for (const std::string& u : t->unmapped) keys += u.substr(0, u.find(':')) + ";";
  EXPECT_EQ(keys, "value.converter;producer.override.sasl.jaas.config;") << t->toml;
}

// Issue 43: a connector that requires exactly-once delivery (KIP-618) gets walrelay's
// exactly-once mode; its transaction boundary is said, not silently dropped.
TEST(FromDebeziumTest, ExactlyOnceSupportRequiredTurnsOnExactlyOnceMode) {
  const std::string properties =
      "connector.class=io.debezium.connector.postgresql.PostgresConnector\n"
      "database.hostname=db\ndatabase.dbname=orders\ndatabase.user=dbz\n"
      "exactly.once.support=required\ntransaction.boundary=poll\n";
  auto t = TranslateDebeziumConfig(properties);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_NE(t->toml.find("\nexactly_once = true"), std::string::npos) << t->toml;
  EXPECT_NE(t->toml.find("# transaction.boundary=poll: walrelay's Kafka transactions always "
                         "hold whole source transactions"),
            std::string::npos)
      << t->toml;
  EXPECT_TRUE(t->unmapped.empty()) << t->toml;

  auto requested = TranslateDebeziumConfig(
      "connector.class=io.debezium.connector.postgresql.PostgresConnector\n"
      "database.dbname=orders\nexactly.once.support=requested\n");
  ASSERT_TRUE(requested.ok()) << requested.status().ToString();
  EXPECT_EQ(requested->toml.find("\nexactly_once = true"), std::string::npos) << requested->toml;
  EXPECT_NE(requested->toml.find("# exactly.once.support=requested"), std::string::npos)
      << requested->toml;
}

TEST(FromDebeziumTest, AStrimziKafkaConnectorIsRead) {
  const std::string yaml = R"(apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaConnector
metadata:
  name: outbox-connector
  labels:
    strimzi.io/cluster: my-connect
spec:
  class: io.debezium.connector.postgresql.PostgresConnector
  tasksMax: 1
  config:
    database.hostname: postgres.db.svc   # the primary
    database.port: 5432
    database.user: "${secrets:db/debezium:username}"
    database.password: ${secrets:db/debezium:password}
    database.dbname: 'orders'
    topic.prefix: orders
    slot.name: orders_slot
    table.include.list: public.outbox
    transforms: outbox
    transforms.outbox.type: io.debezium.transforms.outbox.EventRouter
    transforms.outbox.route.topic.replacement: "orders.${routedByValue}"
    key.converter: org.apache.kafka.connect.storage.StringConverter
    value.converter: org.apache.kafka.connect.storage.StringConverter
)";
  auto t = TranslateDebeziumConfig(yaml);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_NE(t->toml.find("dsn = \"host=postgres.db.svc port=5432 dbname=orders\""),
            std::string::npos)
      << t->toml;
  // A config provider's reference is not a value walrelay can use: said, not copied.
  ASSERT_EQ(t->unmapped.size(), 1u);
  EXPECT_EQ(t->unmapped[0].rfind("database.user: a Kafka Connect config provider reference", 0),
            0u)
      << t->unmapped[0];
  EXPECT_EQ(t->toml.find("debezium:password"), std::string::npos) << t->toml;
  EXPECT_NE(t->toml.find("slot = \"orders_slot\""), std::string::npos) << t->toml;
  EXPECT_NE(t->toml.find("topic_template = \"orders.${aggregate_type}\""), std::string::npos);
  EXPECT_NE(t->toml.find("value_format = \"raw\""), std::string::npos);
  EXPECT_EQ(TranslateDebeziumConfig("kind: KafkaConnector\nspec:\n  config:\n    a: |\n      x\n")
                .status()
                .code(),
            StatusCode::kInvalidArgument)
      << "a block scalar is refused, not misread";
}

TEST(FromDebeziumTest, WhatIsNotAPostgresConnectorConfigurationIsRefused) {
  EXPECT_EQ(TranslateDebeziumConfig("connector.class=io.debezium.connector.mysql.MySqlConnector")
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(TranslateDebeziumConfig("apiVersion: v1\nkind: ConfigMap").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(TranslateDebeziumConfig("{not json").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TranslateDebeziumConfig("just words").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace walrelay::cli
