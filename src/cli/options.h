// The option registry of `walrelay run`: one table that drives the command line (CLI11),
// the WALRELAY_* environment variables, the TOML configuration file and the generated
// configuration reference (docs/configuration.md, checked by a test).
//
// Precedence: flag > environment variable > file > built-in default.
// Naming is derived from the TOML key so the three spellings never drift apart:
//   TOML `kafka.bootstrap_servers` = flag `--kafka-bootstrap-servers`
//                                  = env `WALRELAY_KAFKA_BOOTSTRAP_SERVERS`.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "src/relay/core/config.h"

namespace walrelay::cli {

enum class OptionKind { kString, kBool, kInt, kList, kMap };

struct OptionSpec {
  std::string key;  // TOML key, "section.name"
  OptionKind kind;
  std::string help;     // one or two sentences: meaning and units
  bool secret = false;  // value never printed
  // Applies raw values (one for scalars; one per element for lists; "k=v" for maps).
  std::function<Status(relay::RelayConfig&, const std::vector<std::string>&)> apply;
  // The default, as text, read back from a default-constructed RelayConfig.
  std::function<std::string(const relay::RelayConfig&)> show;

  std::string Flag() const;    // "--kafka-bootstrap-servers"
  std::string EnvVar() const;  // "WALRELAY_KAFKA_BOOTSTRAP_SERVERS"
};

// Every option of `walrelay run`, in documentation order.
const std::vector<OptionSpec>& RunOptions();

// Loads a TOML file into `values`: for each registry key present in the file, its raw
// values. Unknown keys are an error (a typo must not be silently ignored).
Status LoadTomlFile(const std::string& path,
                    std::vector<std::pair<const OptionSpec*, std::vector<std::string>>>* values);

// Environment variables with the WALRELAY_ prefix that are not options but are read by
// walrelay, walrelay-ledger, the project's scripts or its test harness (each with its
// reader in options.cc). A variable with the prefix that is neither is refused.
const std::vector<std::string_view>& OtherWalrelayVariables();

// Refuses (kInvalidArgument, with "did you mean") a WALRELAY_* name in `environment`
// ("NAME=value" entries) that is neither an option's variable, one of
// OtherWalrelayVariables(), nor one Kubernetes makes for a Service named walrelay*
// (WALRELAY_SERVICE_HOST, WALRELAY_PORT_9187_TCP_ADDR, ...): a misspelled variable is
// refused as a misspelled TOML key is, instead of leaving its option at the default.
Status CheckWalrelayEnvironment(const std::vector<std::string_view>& environment);

// The configuration reference in Markdown, generated from the registry.
std::string ConfigurationReference();

// Exit codes of `walrelay run` (and the table its --help shows):
//   0  stopped cleanly (SIGTERM/SIGINT): every acked transaction confirmed
//   1  a runtime failure a restart may cure (database or Kafka unreachable for good, ...)
//   2  bad usage or configuration (kInvalidArgument; and kFailedPrecondition, kNotFound,
//      kPermissionDenied, which `run` returns only from its start checks): a restart with
//      the same options fails the same way
//   3  refused to go on without an operator (kDataLoss: the slot was lost and recovery is
//      off or unsound): restarting would lose or repeat events; see the log's fix
inline constexpr int kExitOk = 0, kExitFailure = 1, kExitUsage = 2, kExitNeedsOperator = 3;
int ExitCodeFor(const Status& status);
extern const char* const kRunExitCodesHelp;

// The connection string for logs: parsed by libpq (PQconninfoParse) and shown as
// keyword=value pairs with password and sslpassword replaced by ********, whatever form
// it was given in (URI, percent-encoded, query parameter); a string libpq cannot parse is
// not shown at all. An empty string (libpq's environment and defaults decide) is shown as
// the PG* connection variables that are set, PGPASSWORD never.
std::string RedactConninfo(std::string_view conninfo);

}  // namespace walrelay::cli

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace walrelay::cli {

// Registers every RunOptions() entry (plus --config) on a CLI11 (sub)command and, after
// parsing, merges flags, environment and file into a RelayConfig.
// Lifetime: the binder must outlive the App's parse.
class RunOptionBinder {
 public:
  explicit RunOptionBinder(CLI::App* app);
  // REQUIRES: the App has been parsed. `require_kafka` false skips the Kafka checks
  // (for commands that only touch PostgreSQL).
  Result<relay::RelayConfig> Resolve(bool require_kafka = true) const;
  // The outbox profile applied when none is given (`walrelay cutover debezium`: debezium).
  void set_default_profile(std::string profile) { default_profile_ = std::move(profile); }

 private:
  struct Bound {
    const OptionSpec* spec;
    CLI::Option* option;
    std::vector<std::string> values;
  };
  std::vector<Bound> bound_;
  std::string config_path_;
  std::string default_profile_ = "walrelay";
};

}  // namespace walrelay::cli
