// The inbox contract (docs/inbox-contract.md) against the code: the header tables of the
// document list exactly the names of base/headers.h, in order, and a record the real
// Pipeline produces carries exactly the documented headers (plus the row's own).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/headers.h"
#include "src/relay/core/dead_letter.h"
#include "src/relay/core/pipeline.h"
#include "tests/relay/pipeline_test_util.h"

namespace walrelay::relay {
namespace {

std::string ReadContract() {
  std::ifstream in(std::string(WALRELAY_SOURCE_DIR) + "/docs/inbox-contract.md");
  EXPECT_TRUE(in) << "docs/inbox-contract.md missing";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The first column (a `name` in backticks) of the first table after `heading`.
std::vector<std::string> TableNames(const std::string& doc, const std::string& heading) {
  std::vector<std::string> names;
  size_t at = doc.find("\n" + heading + "\n");
  EXPECT_NE(at, std::string::npos) << "no heading '" << heading << "'";
  if (at == std::string::npos) return names;
  std::istringstream lines(doc.substr(at + heading.size() + 2));
  bool in_table = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("#")) break;
    if (!line.starts_with("|")) {
      if (in_table) break;
      continue;
    }
    in_table = true;
    if (!line.starts_with("| `")) continue;  // the header row and the separator
    const size_t end = line.find('`', 3);
    names.push_back(line.substr(3, end - 3));
  }
  return names;
}

std::vector<std::string> Strings(std::span<const std::string_view> names) {
  return {names.begin(), names.end()};
}

TEST(ContractTest, DocumentedHeadersAreTheHeadersInCode) {
  const std::string doc = ReadContract();
  EXPECT_EQ(TableNames(doc, "### Record headers"), Strings(headers::kRelayHeaders));
}

// The dead-letter header table sits in section 5, after the paragraph about the record.
TEST(ContractTest, DocumentedDeadLetterHeadersAreTheHeadersInCode) {
  const std::string doc = ReadContract();
  const size_t section = doc.find("## 5. Poison messages and dead letters");
  ASSERT_NE(section, std::string::npos);
  const size_t record = doc.find("**The record**", section);
  ASSERT_NE(record, std::string::npos);
  std::vector<std::string> names;
  std::istringstream lines(doc.substr(record));
  bool in_table = false;
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("|")) {
      if (in_table) break;
      continue;
    }
    in_table = true;
    if (line.starts_with("| `")) names.push_back(line.substr(3, line.find('`', 3) - 3));
  }
  EXPECT_EQ(names, Strings(headers::kDeadLetterHeaders));
}

// The records of one scripted outbox row (ScriptedSource: commit time 2000-01-01) run
// through the real pipeline under `config`.
testing::HoldingSink RunOneRow(RelayConfig config, std::string_view row_headers) {
  RelayStats stats;
  testing::ScriptedSource source(0, std::string(row_headers));
  testing::HoldingSink sink;
  EXPECT_TRUE(testing::RunUntilEndOfStream(std::move(config), stats, source, sink).ok());
  return sink;
}

TEST(ContractTest, AProducedRecordCarriesExactlyTheDocumentedHeaders) {
  // One outbox row with aggregate_type set and one header of its own.
  testing::HoldingSink sink = RunOneRow(RelayConfig{}, R"({"trace_id": "t-1"})");
  ASSERT_EQ(sink.header_names.size(), 1u);
  std::vector<std::string> documented = TableNames(ReadContract(), "### Record headers");
  ASSERT_FALSE(documented.empty());
  // The row's own headers come right before walrelay.position (the last one).
  documented.insert(documented.end() - 1, "trace_id");
  EXPECT_EQ(sink.header_names[0], documented);
}

// Section 1's encoding of a row's own headers: strings as they are, numbers and booleans
// as their JSON text, null as a header without a value (not an empty one).
TEST(ContractTest, RowHeadersAreEncodedAsDocumented) {
  testing::HoldingSink sink = RunOneRow(RelayConfig{}, R"({"trace_id": "t-1", "empty": "", "n": 1.5,)"
                                                       R"( "flag": true, "none": null})");
  ASSERT_EQ(sink.header_values.size(), 1u);
  const auto& names = sink.header_names[0];
  const auto& values = sink.header_values[0];
  ASSERT_EQ(names.size(), 9u);  // event_id, event_type, aggregate_type, 5 own, position
  EXPECT_EQ(names[3], "trace_id");
  EXPECT_EQ(values[3], std::optional<std::string>("t-1"));
  EXPECT_EQ(values[4], std::optional<std::string>(""));
  EXPECT_EQ(values[5], std::optional<std::string>("1.5"));
  EXPECT_EQ(values[6], std::optional<std::string>("true"));
  EXPECT_EQ(names[7], "none");
  EXPECT_EQ(values[7], std::nullopt) << "a JSON null must be a header without a value";
  EXPECT_EQ(values[0], std::optional<std::string>("0190a0c4-7d2e-7000-8000-000000000001"));
  EXPECT_EQ(values[8],
            std::optional<std::string>("lsn=0/1000000;ordinal=0;xid=700;"
                                       "commit_time_us=946684800000000;source=public.outbox"));
}

// outbox.headers renames what the relay writes (Debezium's consumers read the event id
// from `id`), and an empty event_type / aggregate_type name leaves that header out.
TEST(ContractTest, ConfiguredHeaderNamesAreWrittenInTheContractsOrder) {
  RelayConfig config;
  config.header_names = {"id", "", "", "walrelay.position"};
  testing::HoldingSink sink = RunOneRow(config, R"({"trace_id": "t-1"})");
  ASSERT_EQ(sink.header_names.size(), 1u);
  EXPECT_EQ(sink.header_names[0],
            (std::vector<std::string>{"id", "trace_id", "walrelay.position"}));
  EXPECT_EQ(sink.header_values[0][0],
            std::optional<std::string>("0190a0c4-7d2e-7000-8000-000000000001"));

  config.header_names = {"eventId", "eventType", "aggregateType", "x-position"};
  sink = RunOneRow(config, "{}");
  ASSERT_EQ(sink.header_names.size(), 1u);
  EXPECT_EQ(sink.header_names[0],
            (std::vector<std::string>{"eventId", "eventType", "aggregateType", "x-position"}));
}

// kafka.record_timestamp: produce time (0 handed to librdkafka) by default, the source
// transaction's commit time in ms when asked (what Debezium sets).
TEST(ContractTest, RecordTimestampIsTheCommitTimeWhenConfigured) {
  RelayConfig config;
  testing::HoldingSink sink = RunOneRow(config, "{}");
  ASSERT_EQ(sink.timestamps_ms.size(), 1u);
  EXPECT_EQ(sink.timestamps_ms[0], 0);
  config.record_timestamp = RecordTimestamp::kCommit;
  sink = RunOneRow(config, "{}");
  ASSERT_EQ(sink.timestamps_ms.size(), 1u);
  EXPECT_EQ(sink.timestamps_ms[0], 946684800000) << "2000-01-01T00:00:00Z in ms";
}

TEST(ContractTest, HeaderNamesAreValidated) {
  RelayConfig config;
  config.source_dsn = "dbname=x";
  config.embedded_kafka = true;
  ASSERT_TRUE(config.Validate().ok()) << config.Validate().ToString();
  config.header_names.event_id = "";
  EXPECT_EQ(config.Validate().code(), StatusCode::kInvalidArgument);
  config.header_names = {"id", "ID", "", "walrelay.position"};
  Status st = config.Validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("two headers"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace walrelay::relay
