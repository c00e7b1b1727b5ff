#include "src/cli/options.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <simdjson.h>
#include <spdlog/details/log_msg.h>
#include <spdlog/formatter.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "base/suggest.h"
#include "src/cli/log_format.h"

namespace walrelay::cli {
namespace {

struct Parsed {
  Result<relay::RelayConfig> config = InternalError("not parsed");
};

Parsed Parse(std::vector<std::string> args) {
  CLI::App app;
  RunOptionBinder binder(&app);
  std::vector<const char*> argv = {"walrelay"};
  for (auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  Parsed p;
  p.config = binder.Resolve();
  return p;
}

std::string WriteFile(const std::string& text) {
  char path[] = "/tmp/walrelay-options-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  return path;
}

const std::vector<std::string> kMinimal = {"--source-dsn", "dbname=app",
                                           "--kafka-bootstrap-servers", "k:9092"};

TEST(OptionsTest, DefaultsMatchTheDocumentedSchema) {
  auto p = Parse(kMinimal);
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  EXPECT_EQ(p.config->slot, "walrelay");
  EXPECT_EQ(p.config->tables, std::vector<std::string>{"public.outbox"});
  EXPECT_EQ(p.config->columns.aggregate_id, "aggregate_id");
  EXPECT_EQ(p.config->topic_template, "outbox.${aggregate_type}");
}

TEST(OptionsTest, FlagBeatsEnvBeatsFile) {
  std::string file = WriteFile(
      "[source]\nslot = \"from_file\"\npublication = \"pub_file\"\n"
      "tables = [\"app.outbox\", \"billing.outbox\"]\n"
      "[kafka]\nbootstrap_servers = \"file:9092\"\n"
      "[kafka.properties]\n\"linger.ms\" = 7\n"
      "[outbox.columns]\naggregate_id = \"account_id\"\n");
  setenv("WALRELAY_SOURCE_SLOT", "from_env", 1);
  setenv("WALRELAY_SOURCE_PUBLICATION", "pub_env", 1);
  auto p = Parse({"--config", file, "--source-dsn", "dbname=app", "--source-slot", "from_flag"});
  unsetenv("WALRELAY_SOURCE_SLOT");
  unsetenv("WALRELAY_SOURCE_PUBLICATION");
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  EXPECT_EQ(p.config->slot, "from_flag");
  EXPECT_EQ(p.config->publication, "pub_env");
  EXPECT_EQ(p.config->bootstrap_servers, "file:9092");
  EXPECT_EQ(p.config->tables, (std::vector<std::string>{"app.outbox", "billing.outbox"}));
  EXPECT_EQ(p.config->kafka_properties.at("linger.ms"), "7");
  EXPECT_EQ(p.config->columns.aggregate_id, "account_id");
  std::remove(file.c_str());
}

// The Debezium profile: what a Debezium PostgreSQL connector with the Outbox Event Router
// has by default, setting by setting (Debezium property -> walrelay option).
TEST(OptionsTest, DebeziumProfileSetsTheOutboxEventRoutersDefaults) {
  std::vector<std::string> args = kMinimal;
  args.insert(args.end(), {"--outbox-profile", "debezium"});
  auto p = Parse(args);
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  const relay::RelayConfig& c = *p.config;
  struct Row {
    const char* debezium;  // the Debezium property and its default
    std::string walrelay, expected;
  };
  const Row rows[] = {
      {"table.field.event.id=id", c.columns.event_id, "id"},
      {"table.field.event.key=aggregateid", c.columns.aggregate_id, "aggregateid"},
      {"table.field.event.payload=payload", c.columns.payload, "payload"},
      {"route.by.field=aggregatetype", c.columns.aggregate_type, "aggregatetype"},
      {"(documented DDL) type", c.columns.event_type, "type"},
      {"route.topic.replacement=outbox.event.${routedByValue}", c.topic_template,
       "outbox.event.${aggregate_type}"},
      {"event id header id", c.header_names.event_id, "id"},
      {"no type header", c.header_names.event_type, ""},
      {"no aggregate type header", c.header_names.aggregate_type, ""},
      {"slot.name=debezium", c.slot, "debezium"},
      {"publication.name=dbz_publication", c.publication, "dbz_publication"},
      {"uuid id: no ordering column", c.columns.id, ""},
      {"no topic column", c.columns.topic, ""},
      {"no headers column", c.columns.headers, ""},
  };
  for (const Row& r : rows) EXPECT_EQ(r.walrelay, r.expected) << r.debezium;
  EXPECT_EQ(c.record_timestamp, relay::RecordTimestamp::kCommit);
  EXPECT_EQ(c.key_format, relay::TextFormat::kRaw);
  EXPECT_EQ(c.value_format, relay::TextFormat::kRaw);
  EXPECT_EQ(c.profile, "debezium");
}

// A profile only sets defaults: every other option wins over it, wherever it comes from
// (the profile in the file, an override on the command line, and the other way round).
TEST(OptionsTest, OptionsOverrideTheProfileWhereverTheyComeFrom) {
  std::string file = WriteFile(
      "[outbox]\nprofile = \"debezium\"\nvalue_format = \"json-string\"\n"
      "[outbox.headers]\nevent_type = \"eventType\"\n");
  std::vector<std::string> args = kMinimal;
  args.insert(args.end(), {"--config", file, "--source-slot", "mine", "--outbox-column",
                           "aggregate_id=aggregate_id", "--kafka-record-timestamp", "produce"});
  auto p = Parse(args);
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  EXPECT_EQ(p.config->profile, "debezium");
  EXPECT_EQ(p.config->slot, "mine");
  EXPECT_EQ(p.config->publication, "dbz_publication");
  EXPECT_EQ(p.config->columns.aggregate_id, "aggregate_id");
  EXPECT_EQ(p.config->columns.event_id, "id");
  EXPECT_EQ(p.config->header_names.event_type, "eventType");
  EXPECT_EQ(p.config->value_format, relay::TextFormat::kJsonString);
  EXPECT_EQ(p.config->record_timestamp, relay::RecordTimestamp::kProduce);
  std::remove(file.c_str());

  // Profile on the command line, an override in the file.
  file = WriteFile("[outbox]\ntopic_template = \"events.${aggregate_type}\"\n");
  args = kMinimal;
  args.insert(args.end(), {"--config", file, "--outbox-profile", "debezium"});
  p = Parse(args);
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  EXPECT_EQ(p.config->topic_template, "events.${aggregate_type}");
  EXPECT_EQ(p.config->columns.event_id, "id");
  std::remove(file.c_str());

  args = kMinimal;
  args.insert(args.end(), {"--outbox-profile", "kafka-connect"});
  p = Parse(args);
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("expected walrelay or debezium"), std::string::npos)
      << p.config.status().ToString();
}

TEST(OptionsTest, UnknownFileKeyIsAnError) {
  std::string file = WriteFile("[source]\nslto = \"typo\"\n");
  auto p = Parse({"--config", file, "--source-dsn", "x", "--kafka-bootstrap-servers", "k:1"});
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("unknown option 'source.slto'"), std::string::npos);
  std::remove(file.c_str());
}

// Configurations written for the id-based recovery carry its look-back: they get the
// reason, not a bare "unknown option".
TEST(OptionsTest, RemovedRecoveryLookbackSaysWhy) {
  std::string file = WriteFile("[recovery]\nlookback_ms = 3600000\n");
  auto p = Parse({"--config", file, "--source-dsn", "x", "--kafka-bootstrap-servers", "k:1"});
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("'recovery.lookback_ms' was removed"),
            std::string::npos)
      << p.config.status().ToString();
  std::remove(file.c_str());
}

TEST(OptionsTest, BadValuesSayWhatIsWrong) {
  auto args = kMinimal;
  args.insert(args.end(), {"--flow-max-in-flight-events", "lots"});
  auto p = Parse(args);
  ASSERT_FALSE(p.config.ok());
  EXPECT_EQ(p.config.status().message(),
            "--flow-max-in-flight-events: expected an integer, got 'lots'");

  auto weak = kMinimal;
  weak.insert(weak.end(), {"--kafka-property", "acks=1"});
  p = Parse(weak);
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("acks=all"), std::string::npos);

  auto timeout = kMinimal;  // issue 10 item 6: records never time out
  timeout.insert(timeout.end(), {"--kafka-property", "message.timeout.ms=300000"});
  p = Parse(timeout);
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("never times records out"), std::string::npos)
      << p.config.status().message();

  p = Parse({"--kafka-bootstrap-servers", "k:1"});
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("--source-dsn"), std::string::npos);
}

// Issue 43: exactly-once mode's options, from flags, the environment and TOML, and the
// combinations it refuses, each with what to do.
TEST(OptionsTest, ExactlyOnceOptionsAndWhatTheyRefuse) {
  auto args = kMinimal;
  args.insert(args.end(), {"--kafka-exactly-once", "true", "--kafka-transaction-interval-ms",
                           "250", "--kafka-checkpoint-topic", "billing.checkpoints"});
  auto p = Parse(args);
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  EXPECT_TRUE(p.config->exactly_once);
  EXPECT_EQ(p.config->kafka_transaction_interval, std::chrono::milliseconds(250));
  EXPECT_EQ(p.config->checkpoint_topic, "billing.checkpoints");
  EXPECT_EQ(p.config->kafka_transactional_id, "") << "derived from the stream by default";

  const std::string toml = WriteFile(
      "[kafka]\nexactly_once = true\ntransactional_id = \"walrelay-billing\"\n");
  p = Parse({"--config", toml, "--source-dsn", "dbname=app", "--kafka-bootstrap-servers", "k:1"});
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  EXPECT_TRUE(p.config->exactly_once);
  EXPECT_EQ(p.config->kafka_transactional_id, "walrelay-billing");
  EXPECT_EQ(p.config->checkpoint_topic, "walrelay.checkpoints");
  EXPECT_EQ(p.config->kafka_transaction_interval, std::chrono::milliseconds(100));
  std::remove(toml.c_str());

  ::setenv("WALRELAY_KAFKA_EXACTLY_ONCE", "true", 1);
  p = Parse(kMinimal);
  ::unsetenv("WALRELAY_KAFKA_EXACTLY_ONCE");
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  EXPECT_TRUE(p.config->exactly_once);

  auto poll = kMinimal;
  poll.insert(poll.end(), {"--kafka-exactly-once", "true", "--source-mode", "poll"});
  p = Parse(poll);
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("needs --source-mode wal"), std::string::npos)
      << p.config.status().message();

  auto id_alone = kMinimal;
  id_alone.insert(id_alone.end(), {"--kafka-transactional-id", "x"});
  p = Parse(id_alone);
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("without --kafka-exactly-once"), std::string::npos)
      << p.config.status().message();

  auto property = kMinimal;
  property.insert(property.end(),
                  {"--kafka-exactly-once", "true", "--kafka-property", "transactional.id=x"});
  p = Parse(property);
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("--kafka-transactional-id instead"),
            std::string::npos)
      << p.config.status().message();

  auto interval = kMinimal;
  interval.insert(interval.end(),
                  {"--kafka-exactly-once", "true", "--kafka-transaction-interval-ms", "0"});
  p = Parse(interval);
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("expected 1..60000"), std::string::npos)
      << p.config.status().message();

  auto topic = kMinimal;
  topic.insert(topic.end(),
               {"--kafka-exactly-once", "true", "--kafka-checkpoint-topic", "no spaces"});
  p = Parse(topic);
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("is not a topic name"), std::string::npos)
      << p.config.status().message();
}

// Issue 42 item 7: a topic template with an unknown placeholder or a character Kafka
// refuses was accepted, and every event was then dead-lettered. It is refused where it is
// configured (exit 2), naming the placeholder and the ones that exist.
TEST(OptionsTest, TopicTemplateIsCheckedWhereItIsConfigured) {
  auto with = [](const std::string& tmpl) {
    auto args = kMinimal;
    args.insert(args.end(), {"--outbox-topic-template", tmpl});
    return Parse(args).config;
  };
  auto typo = with("outbox.${aggregate_typ}");
  ASSERT_FALSE(typo.ok());
  EXPECT_EQ(typo.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(typo.status().message().find("unknown placeholder ${aggregate_typ}; did you mean "
                                         "aggregate_type?"),
            std::string::npos)
      << typo.status().message();
  EXPECT_NE(typo.status().message().find("known: ${aggregate_type}, ${event_type}, ${table}"),
            std::string::npos)
      << typo.status().message();
  auto space = with("outbox ${aggregate_type}");
  ASSERT_FALSE(space.ok());
  EXPECT_NE(space.status().message().find("has the character ' '"), std::string::npos)
      << space.status().message();
  EXPECT_FALSE(with("outbox.${aggregate_type").ok()) << "an unclosed placeholder";
  EXPECT_FALSE(with(std::string(250, 'x')).ok());
  EXPECT_FALSE(with("..").ok());
  for (const char* good : {"outbox.${aggregate_type}", "${table}.${event_type}", "events",
                           "a-b_c.${aggregate_type}-v2"}) {
    auto ok = with(good);
    EXPECT_TRUE(ok.ok()) << good << ": " << ok.status().ToString();
  }
}

// Without --source-dsn, run takes libpq's environment like lag, psql and pg_recvlogical
// do (issue 13), when it names a server; the start log shows which variables decided.
TEST(OptionsTest, RunTakesLibpqEnvironmentWithoutADsn) {
  for (const char* name : {"PGHOST", "PGHOSTADDR", "PGDATABASE", "PGSERVICE", "PGPORT"}) {
    ::unsetenv(name);
  }
  auto p = Parse({"--kafka-bootstrap-servers", "k:1"});
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("PGHOST"), std::string::npos)
      << p.config.status().message();
  ::setenv("PGHOST", "/run/postgresql", 1);
  ::setenv("PGPORT", "5433", 1);
  ::setenv("PGPASSWORD", "env-SECRET", 1);
  p = Parse({"--kafka-bootstrap-servers", "k:1"});
  const std::string shown = RedactConninfo("");
  ::unsetenv("PGHOST");
  ::unsetenv("PGPORT");
  ::unsetenv("PGPASSWORD");
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  EXPECT_EQ(p.config->source_dsn, "");
  EXPECT_EQ(shown, "libpq's environment and defaults (PGHOST=/run/postgresql PGPORT=5433)");
}

TEST(OptionsTest, KafkaPropertyValuesMayHoldCommas) {
  auto args = kMinimal;
  args.insert(args.end(),
              {"--kafka-property", "debug=broker,topic", "--kafka-property", "linger.ms=1"});
  auto p = Parse(args);
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  EXPECT_EQ(p.config->kafka_properties.at("debug"), "broker,topic");
  EXPECT_EQ(p.config->kafka_properties.at("linger.ms"), "1");
}

// Several ways to give librdkafka properties (issue 13): unquoted dotted TOML names, a
// properties file in kcat's -F format (explicit properties win), and several properties in
// one environment variable separated by newlines, values with commas intact.
TEST(OptionsTest, KafkaPropertiesFromTomlFileAndEnvironment) {
  std::string toml = WriteFile(
      "[source]\ndsn = \"dbname=app\"\n[kafka]\nbootstrap_servers = \"k:9092\"\n"
      "[kafka.properties]\nlinger.ms = 7\nsasl.mechanism = \"PLAIN\"\n\"batch.size\" = 1000\n");
  auto p = Parse({"--config", toml});
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  EXPECT_EQ(p.config->kafka_properties.at("linger.ms"), "7");
  EXPECT_EQ(p.config->kafka_properties.at("sasl.mechanism"), "PLAIN");
  EXPECT_EQ(p.config->kafka_properties.at("batch.size"), "1000");
  std::remove(toml.c_str());

  std::string props = WriteFile(
      "# kcat -F format\r\nsecurity.protocol=SASL_SSL\r\n\n  sasl.password=s3cret,with=comma\n"
      "linger.ms=1\n");
  auto args = kMinimal;
  args.insert(args.end(), {"--kafka-properties-file", props, "--kafka-property", "linger.ms=9"});
  p = Parse(args);
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  EXPECT_EQ(p.config->kafka_properties.at("security.protocol"), "SASL_SSL");
  EXPECT_EQ(p.config->kafka_properties.at("sasl.password"), "s3cret,with=comma");
  EXPECT_EQ(p.config->kafka_properties.at("linger.ms"), "9");

  std::string bad = WriteFile("linger.ms=1\nsasl.password s3cret\n");
  args = kMinimal;
  args.insert(args.end(), {"--kafka-properties-file", bad});
  p = Parse(args);
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("line 2"), std::string::npos)
      << p.config.status().ToString();
  EXPECT_EQ(p.config.status().message().find("s3cret"), std::string::npos)
      << p.config.status().ToString();
  std::remove(props.c_str());
  std::remove(bad.c_str());

  ::setenv("WALRELAY_KAFKA_PROPERTIES", "debug=broker,topic\nlinger.ms=3", 1);
  p = Parse(kMinimal);
  ::unsetenv("WALRELAY_KAFKA_PROPERTIES");
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  EXPECT_EQ(p.config->kafka_properties.at("debug"), "broker,topic");
  EXPECT_EQ(p.config->kafka_properties.at("linger.ms"), "3");
}

// The password stays apart from the DSN (slot::ConnInfo), whatever form the DSN has.
TEST(OptionsTest, SourceConninfoKeepsThePasswordApartFromTheDsn) {
  relay::RelayConfig config;
  config.source_dsn = "postgresql://relay@db:5432/app";
  config.source_password = "s3cret";
  const slot::ConnInfo ci = config.SourceConninfo();
  EXPECT_EQ(ci.dsn, "postgresql://relay@db:5432/app");
  EXPECT_EQ(ci.password, "s3cret");
}

TEST(OptionsTest, PasswordFileIsReadAndRedacted) {
  std::string file = WriteFile("s3cret\n");
  auto args = kMinimal;
  args.insert(args.end(), {"--source-password-file", file});
  auto p = Parse(args);
  ASSERT_TRUE(p.config.ok());
  EXPECT_EQ(p.config->source_password, "s3cret");
  std::remove(file.c_str());
}

// A password file is refused when others may read it, empty, or missing; a Windows line
// end is not part of the password (issue 13).
TEST(OptionsTest, PasswordFileRules) {
  std::string crlf = WriteFile("s3cret\r\nsecond line\n");
  auto p = slot::ReadPasswordFile(crlf);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, "s3cret");
  ASSERT_EQ(::chmod(crlf.c_str(), 0644), 0);
  auto open_file = slot::ReadPasswordFile(crlf);
  EXPECT_EQ(open_file.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(open_file.status().message().find("chmod 600"), std::string::npos);
  EXPECT_EQ(open_file.status().message().find("s3cret"), std::string::npos);
  ASSERT_EQ(::chmod(crlf.c_str(), 0640), 0);
  EXPECT_EQ(slot::ReadPasswordFile(crlf).status().code(), StatusCode::kPermissionDenied);
  std::remove(crlf.c_str());
  std::string empty = WriteFile("");
  EXPECT_EQ(slot::ReadPasswordFile(empty).status().code(), StatusCode::kInvalidArgument);
  std::string blank = WriteFile("\n");
  EXPECT_EQ(slot::ReadPasswordFile(blank).status().code(), StatusCode::kInvalidArgument);
  std::remove(empty.c_str());
  std::remove(blank.c_str());
  EXPECT_EQ(slot::ReadPasswordFile("/nonexistent/walrelay-password").status().code(),
            StatusCode::kInvalidArgument);
  // Through the option: the run refuses to start.
  std::string loose = WriteFile("s3cret\n");
  ASSERT_EQ(::chmod(loose.c_str(), 0604), 0);
  auto args = kMinimal;
  args.insert(args.end(), {"--source-password-file", loose});
  EXPECT_FALSE(Parse(args).config.ok());
  std::remove(loose.c_str());
}

// run's exit codes (issue 13): what a supervisor may restart and what it must not.
TEST(OptionsTest, ExitCodesTellASupervisorWhatToDo) {
  EXPECT_EQ(ExitCodeFor(Status::Ok()), 0);
  EXPECT_EQ(ExitCodeFor(UnavailableError("kafka down")), 1);
  EXPECT_EQ(ExitCodeFor(InvalidArgumentError("bad option")), 2);
  // Configuration found wrong against the server: systemd must not restart for ever.
  EXPECT_EQ(ExitCodeFor(FailedPreconditionError("wal_level is 'replica'")), 2);
  EXPECT_EQ(ExitCodeFor(NotFoundError("database \"app\" does not exist")), 2);
  EXPECT_EQ(ExitCodeFor(PermissionDeniedError("no password supplied")), 2);
  EXPECT_EQ(ExitCodeFor(DataLossError("slot lost, recovery off")), 3);
  EXPECT_NE(std::string(kRunExitCodesHelp).find("RestartPreventExitStatus=2 3"),
            std::string::npos);
}

// --ops-log-format json: one valid JSON object per line, whatever the message holds.
TEST(OptionsTest, JsonLogLinesAreValidJson) {
  auto formatter = MakeJsonLogFormatter();
  const std::string message = "slot \"walrelay\" is\nlost\t\x01 (SQLSTATE 55000)";
  spdlog::details::log_msg msg(spdlog::source_loc{}, "walrelay", spdlog::level::warn, message);
  spdlog::memory_buf_t buf;
  formatter->format(msg, buf);
  const std::string line(buf.data(), buf.size());
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line";
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(line).get(doc), simdjson::SUCCESS) << line;
  std::string_view level, text, time;
  ASSERT_EQ(doc["level"].get(level), simdjson::SUCCESS);
  ASSERT_EQ(doc["message"].get(text), simdjson::SUCCESS);
  ASSERT_EQ(doc["time"].get(time), simdjson::SUCCESS);
  EXPECT_EQ(level, "warning");
  EXPECT_EQ(text, message);
  // 2026-12-03T09:00:00.123+00:00: with milliseconds and the UTC offset.
  EXPECT_EQ(time.size(), 29u) << time;
  EXPECT_TRUE(time[23] == '+' || time[23] == '-') << time;
  EXPECT_EQ(time[26], ':') << time;

  auto args = kMinimal;
  args.insert(args.end(), {"--ops-log-format", "xml"});
  EXPECT_FALSE(Parse(args).config.ok());
  args = kMinimal;
  args.insert(args.end(), {"--ops-log-format", "json"});
  EXPECT_TRUE(Parse(args).config.ok());
  EXPECT_FALSE(SetLogFormat("xml").ok());
}

// DSNs are redacted by libpq's own parser (issue 13): every form libpq accepts hides the
// password, and a string it cannot parse is not shown at all.
TEST(OptionsTest, RedactConninfoHidesPasswordsInEveryForm) {
  const std::string cases[] = {
      "host=h password=s3cret dbname=x",
      "host=h password='a s3cret' dbname=x",
      "host=h password = s3cret dbname=x",
      "postgresql://app:s3cret@db:5432/x",
      "postgresql://app@db/x?password=s3cret&sslmode=require",
      "postgresql://app:%73%33cret@db/x",
      "host=h sslpassword=s3cret sslkey=/k",
      "host=h password='s3cret",  // unterminated quote: libpq refuses it
  };
  for (const std::string& dsn : cases) {
    const std::string shown = RedactConninfo(dsn);
    EXPECT_EQ(shown.find("s3cret"), std::string::npos) << dsn << " -> " << shown;
    EXPECT_EQ(shown.find("%73%33"), std::string::npos) << dsn << " -> " << shown;
  }
  EXPECT_EQ(RedactConninfo("host=h password=s3cret dbname=x"),
            "password=******** dbname=x host=h");
  EXPECT_EQ(RedactConninfo("postgresql://app:s3cret@db:5432/x?sslmode=verify-full"),
            "user=app password=******** dbname=x host=db port=5432 sslmode=verify-full");
  EXPECT_EQ(RedactConninfo("host=h password='s3cret"),
            "<connection string that libpq cannot parse, not shown>");
}

TEST(OptionsTest, NamesDeriveFromTheTomlKey) {
  for (const auto& spec : RunOptions()) {
    if (spec.key == "kafka.bootstrap_servers") {
      EXPECT_EQ(spec.Flag(), "--kafka-bootstrap-servers");
      EXPECT_EQ(spec.EnvVar(), "WALRELAY_KAFKA_BOOTSTRAP_SERVERS");
    }
    if (spec.key == "kafka.properties") {
      EXPECT_EQ(spec.Flag(), "--kafka-property");
    }
    if (spec.key == "source.tables") {
      EXPECT_EQ(spec.Flag(), "--source-table");
    }
  }
}

// docs/configuration.md is generated from the registry; the docs must match the code.
TEST(OptionsTest, ConfigurationReferenceDocIsCurrent) {
  std::ifstream in(std::string(WALRELAY_SOURCE_DIR) + "/docs/configuration.md");
  ASSERT_TRUE(in) << "docs/configuration.md missing";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), ConfigurationReference())
      << "regenerate with: walrelay config-reference > docs/configuration.md";
}

// Every option flag the documentation names exists: a flag of one of the registry's
// sections (--source-*, --kafka-*, ...) in README.md, docs/*.md or docker/README.md that
// is not an option is a typo a reader would copy (issue 42: --outbox-allowed-topics).
TEST(OptionsTest, EveryOptionFlagTheDocsNameExists) {
  std::set<std::string> flags, prefixes;
  for (const auto& spec : RunOptions()) {
    flags.insert(spec.Flag());
    const std::string section = spec.key.substr(0, spec.key.find('.'));
    std::string prefix = "--" + section + "-";
    for (char& ch : prefix) {
      if (ch == '_') ch = '-';
    }
    prefixes.insert(prefix);
  }
  const std::string root = WALRELAY_SOURCE_DIR;
  std::vector<std::string> files = {root + "/README.md", root + "/docker/README.md"};
  for (const char* doc : {"configuration", "guarantees", "inbox-contract", "inbox",
                          "migrating-from-debezium", "operations", "poll-mode",
                          "recording-format", "releasing"}) {
    files.push_back(root + "/docs/" + doc + ".md");
  }
  size_t checked = 0;
  for (const std::string& path : files) {
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    for (size_t at = text.find("--"); at != std::string::npos; at = text.find("--", at + 2)) {
      size_t end = at + 2;
      while (end < text.size() && (std::islower(static_cast<unsigned char>(text[end])) ||
                                   std::isdigit(static_cast<unsigned char>(text[end])) ||
                                   text[end] == '-')) {
        ++end;
      }
      std::string flag = text.substr(at, end - at);
      while (flag.ends_with("-")) flag.pop_back();
      const bool option_like = std::any_of(prefixes.begin(), prefixes.end(), [&](const auto& p) {
        return flag.starts_with(p);
      });
      if (!option_like || (at > 0 && text[at - 1] != ' ' && text[at - 1] != '`' &&
                           text[at - 1] != '(' && text[at - 1] != '\n')) {
        continue;
      }
      ++checked;
      EXPECT_TRUE(flags.count(flag)) << path << " names " << flag << ", which is not an option"
                                     << DidYouMean(flag, {flags.begin(), flags.end()});
    }
  }
  EXPECT_GT(checked, 50u) << "the docs name option flags: the scan found too few";
}

// docker/walrelay.example.toml parses and names every option of the registry, so the
// example stays complete when an option is added (issue 13).
TEST(OptionsTest, ExampleConfigurationParsesAndHasEveryOption) {
  const std::string path = std::string(WALRELAY_SOURCE_DIR) + "/docker/walrelay.example.toml";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  for (const auto& spec : RunOptions()) {
    const size_t dot = spec.key.find('.');
    const std::string section = spec.key.substr(0, dot), name = spec.key.substr(dot + 1);
    const size_t at = text.find("\n[" + section + "]");
    ASSERT_NE(at, std::string::npos) << "no [" << section << "] section";
    const bool as_key = text.find("\n" + name + " =", at) != std::string::npos;
    const bool as_table = text.find("\n[" + spec.key + "]") != std::string::npos;
    EXPECT_TRUE(as_key || as_table) << spec.key << " is missing from " << path;
  }
  // The secret files it names exist only in a deployment: flags point them elsewhere.
  std::string password = WriteFile("s3cret\n");
  std::string props = WriteFile("sasl.password=s3cret\n");
  auto p = Parse({"--config", path, "--source-password-file", password,
                  "--kafka-properties-file", props});
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  EXPECT_EQ(p.config->kafka_properties.at("sasl.mechanism"), "SCRAM-SHA-512");
  EXPECT_EQ(p.config->allowed_topics, std::vector<std::string>{"outbox.*"});
  std::remove(password.c_str());
  std::remove(props.c_str());
}

int RunBinary(const std::string& args) {
  int rc = std::system((std::string(WALRELAY_BINARY) + " " + args + " >/dev/null 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(OptionsTest, ExitCodes) {
  EXPECT_EQ(RunBinary("--help"), 0);
  EXPECT_EQ(RunBinary("run --help"), 0);
  EXPECT_EQ(RunBinary("run --no-such-flag"), 2);
  EXPECT_EQ(RunBinary("run --kafka-bootstrap-servers k:1"), 2);  // no source
  EXPECT_EQ(RunBinary(""), 2);
}

// Issue 42 rough edges: sizes took units in --guard-warn and were refused in
// --flow-max-in-flight-bytes.
TEST(OptionsTest, EverySizeTakesUnits) {
  auto args = kMinimal;
  for (const char* a : {"--flow-max-in-flight-bytes", "16MB", "--guard-warn", "512MB"}) {
    args.push_back(a);
  }
  auto p = Parse(args);
  ASSERT_TRUE(p.config.ok()) << p.config.status().ToString();
  EXPECT_EQ(p.config->max_in_flight_bytes, 16 << 20);
  args = kMinimal;
  for (const char* a : {"--flow-max-in-flight-bytes", "16 parsecs"}) args.push_back(a);
  p = Parse(args);
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("--flow-max-in-flight-bytes"), std::string::npos)
      << p.config.status().ToString();
}

// Issue 42 rough edges: guard thresholds in the wrong order were accepted.
TEST(OptionsTest, GuardWarnAboveCriticalIsRefused) {
  auto args = kMinimal;
  for (const char* a : {"--guard-warn", "8GB", "--guard-critical", "1GB"}) args.push_back(a);
  auto p = Parse(args);
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("--guard-warn (8.00 GB) is above --guard-critical"),
            std::string::npos)
      << p.config.status().ToString();
  args = kMinimal;
  for (const char* a : {"--guard-warn", "90%", "--guard-critical", "0.5"}) args.push_back(a);
  EXPECT_FALSE(Parse(args).config.ok());
  args = kMinimal;  // different kinds cannot be compared without the server: accepted
  for (const char* a : {"--guard-warn", "50%", "--guard-critical", "8GB"}) args.push_back(a);
  EXPECT_TRUE(Parse(args).config.ok());
}

// Issue 42 item 10: the shipped unit restarts what a restart may cure (exit 1) and stops on
// what it cannot (2: configuration, 3: needs an operator), the codes ExitCodeFor gives;
// `scripts/test.sh` runs systemd-analyze verify on the same file.
TEST(OptionsTest, TheSystemdUnitRestartsExactlyTheFailuresARestartCanCure) {
  std::ifstream in(std::string(WALRELAY_SOURCE_DIR) + "/packaging/systemd/walrelay.service");
  ASSERT_TRUE(in);
  std::string line, restart, prevent;
  while (std::getline(in, line)) {
    if (line.rfind("Restart=", 0) == 0) restart = line.substr(8);
    if (line.rfind("RestartPreventExitStatus=", 0) == 0) prevent = line.substr(25);
  }
  EXPECT_EQ(restart, "on-failure");  // a non-zero exit, a signal, the watchdog
  EXPECT_EQ(prevent, std::to_string(kExitUsage) + " " + std::to_string(kExitNeedsOperator));
  EXPECT_EQ(ExitCodeFor(UnavailableError("kafka down")), kExitFailure);
  EXPECT_EQ(ExitCodeFor(FailedPreconditionError("wal_level is replica")), kExitUsage);
  EXPECT_EQ(ExitCodeFor(PermissionDeniedError("no password supplied")), kExitUsage);
  EXPECT_EQ(ExitCodeFor(NotFoundError("database \"app\" does not exist")), kExitUsage);
  EXPECT_EQ(ExitCodeFor(DataLossError("slot lost")), kExitNeedsOperator);
}

// Runs the binary with `env` prepended; its exit code and its stderr.
std::pair<int, std::string> RunBinaryForStderr(const std::string& env, const std::string& args) {
  const std::string err = WriteFile("");
  const int rc = std::system(
      (env + " " + WALRELAY_BINARY + " " + args + " >/dev/null 2>" + err).c_str());
  std::ifstream in(err);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(err.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, ss.str()};
}

// Issue 42 item 9: a misspelt WALRELAY_* variable was ignored (its option kept the default)
// while a misspelt TOML key was refused; both are refused now, with the closest name.
TEST(OptionsTest, AMisspeltEnvironmentVariableIsRefusedLikeAMisspeltKey) {
  auto refused = CheckWalrelayEnvironment(
      {"PATH=/bin", "WALRELAY_SOURCE_SLOT=s", "WALRELAY_KAFKA_BOOTSTRAP_SERVER=k:9092"});
  ASSERT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("WALRELAY_KAFKA_BOOTSTRAP_SERVER is not a walrelay option; "
                                   "did you mean WALRELAY_KAFKA_BOOTSTRAP_SERVERS?"),
            std::string::npos)
      << refused.message();
  // Options, the other variables walrelay and its harness read, and Kubernetes' service
  // links for a Service named walrelay (or walrelay-metrics) pass.
  std::vector<std::string_view> fine = {"WALRELAY_SOURCE_DSN=x", "WALRELAY_CONFIG=/etc/w.toml",
                                        "WALRELAY_SERVICE_HOST=10.0.0.1",
                                        "WALRELAY_SERVICE_PORT_METRICS=9187",
                                        "WALRELAY_PORT=tcp://10.0.0.1:9187",
                                        "WALRELAY_PORT_9187_TCP_ADDR=10.0.0.1",
                                        "WALRELAY_METRICS_SERVICE_PORT=9187", "NOT_WALRELAY_X=1"};
  for (std::string_view v : OtherWalrelayVariables()) fine.push_back(v);
  EXPECT_TRUE(CheckWalrelayEnvironment(fine).ok()) << CheckWalrelayEnvironment(fine).ToString();
  EXPECT_FALSE(CheckWalrelayEnvironment({"WALRELAY_PORTS=1"}).ok());

  // The program refuses it before anything else, for every command.
  auto [rc, err] = RunBinaryForStderr("WALRELAY_SOURCE_SLTO=s", "config-reference");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("WALRELAY_SOURCE_SLTO is not a walrelay option; did you mean "
                     "WALRELAY_SOURCE_SLOT?"),
            std::string::npos)
      << err;

  std::string file = WriteFile("[source]\nslto = \"typo\"\n");
  auto p = Parse({"--config", file, "--source-dsn", "x", "--kafka-bootstrap-servers", "k:1"});
  ASSERT_FALSE(p.config.ok());
  EXPECT_NE(p.config.status().message().find("'source.slto'; did you mean source.slot?"),
            std::string::npos)
      << p.config.status().ToString();
  std::remove(file.c_str());
}

// Issue 42 item 9: `walrelay runn` said only "A subcommand is required".
TEST(OptionsTest, AMisspeltCommandOrFlagGetsTheClosestName) {
  auto [rc, err] = RunBinaryForStderr("", "runn");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("unknown command 'runn'; did you mean run?"), std::string::npos) << err;
  std::tie(rc, err) = RunBinaryForStderr("", "dead-letters lisst");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("unknown command 'lisst'; did you mean list?"), std::string::npos) << err;
  std::tie(rc, err) = RunBinaryForStderr("", "run --kafka-bootstrap-server k:9092");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("unknown option --kafka-bootstrap-server; did you mean "
                     "--kafka-bootstrap-servers?"),
            std::string::npos)
      << err;
  std::tie(rc, err) = RunBinaryForStderr("", "run --source-slto=s");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(err.find("unknown option --source-slto; did you mean --source-slot?"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace walrelay::cli

namespace walrelay::cli {
namespace {

// `run --help` lists every option under its TOML section's title, in the registry's
// order; a subcommand's own options (here --dry-run) come before them.
TEST(OptionsTest, HelpGroupsTheOptionsBySectionAfterTheCommandsOwn) {
  CLI::App app;
  RunOptionBinder binder(&app);
  bool dry_run = false;
  app.add_flag("--dry-run", dry_run, "a subcommand's own flag");
  const std::string help = app.help();
  const size_t own = help.find("--dry-run");
  ASSERT_NE(own, std::string::npos) << help;
  for (const OptionSpec& spec : RunOptions()) {
    const std::string section = spec.key.substr(0, spec.key.find('.'));
    const std::string title_end = "[" + section + ".*]:\n";
    const size_t title = help.find(title_end);
    ASSERT_NE(title, std::string::npos) << "no group for " << spec.key << "\n" << help;
    const size_t flag = help.find("  " + spec.Flag() + " ");
    ASSERT_NE(flag, std::string::npos) << spec.Flag();
    EXPECT_GT(title, own) << "the command's own options come first";
    EXPECT_GT(flag, title) << spec.Flag() << " is under its section's title";
    const size_t next_title = help.find(".*]:\n", title + title_end.size());
    if (next_title != std::string::npos) {
      EXPECT_LT(flag, next_title) << spec.Flag() << " is in another section";
    }
  }
}

}  // namespace
}  // namespace walrelay::cli
