// `walrelay config from-debezium FILE`: a Debezium PostgreSQL connector's configuration,
// as users have it, turned into walrelay's TOML (issue 46, part 4).
//
// Input forms: the Kafka Connect REST JSON (`{"name": ..., "config": {...}}`) or the bare
// config object, a Java `.properties` file (`key=value` or `key: value`, `#`/`!`
// comments), and Strimzi's KafkaConnector YAML (spec.class and the flat map spec.config,
// scalars plain or quoted on one line each; block scalars are refused with the reason).
//
// Output: a TOML file for `walrelay run --config` with `outbox.profile = "debezium"` (whose
// defaults are what the connector and its Outbox Event Router write, docs/migrating-from-
// debezium.md) and every setting that maps, written out; each setting it cannot honour
// becomes a `# not mapped:` comment with the reason, never silently dropped. Secrets
// (database.password, anything whose name says password or secret) are never copied:
// the comment says where walrelay takes them from.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace walrelay::cli {

struct DebeziumTranslation {
  std::string toml;
  // The settings that were not mapped, "key: reason", in input order.
  std::vector<std::string> unmapped;
};

// kInvalidArgument: not a configuration walrelay can read (unparsable, not the PostgreSQL
// connector), with the reason.
Result<DebeziumTranslation> TranslateDebeziumConfig(std::string_view text);

}  // namespace walrelay::cli
