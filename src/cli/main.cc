// walrelay: the command-line program. Subcommands:
//   run               stream the outbox to Kafka (see docs/configuration.md)
//   config-reference  print the configuration reference (Markdown)
//   lag               every slot's retained WAL and lag; a monitoring check (src/cli/lag.h)
//   record / replay   capture a slot's raw stream; replay it through the pipeline (record.h)
//   cutover debezium  take over a stopped Debezium connector's slot and stream from it
//                     (src/relay/takeover.h, docs/migrating-from-debezium.md)
// Exit codes: 0 success, 1 runtime failure, 2 bad usage or configuration, 3 (run) refused to
// go on without an operator (cli::ExitCodeFor, src/cli/options.h).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <iostream>

#include "src/cli/lag.h"
#include "src/cli/log_format.h"
#include "src/cli/options.h"
#include "src/cli/record.h"
#include "src/cli/setup.h"
#include "src/relay/relay.h"
#include "src/relay/takeover.h"

namespace {

walrelay::relay::Relay* g_relay = nullptr;

extern "C" void OnStopSignal(int) {
  if (g_relay != nullptr) g_relay->RequestStop();
}

int RunRelay(const walrelay::relay::RelayConfig& config) {
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  (void)walrelay::cli::SetLogFormat(config.log_format);  // validated by Resolve
  spdlog::info("walrelay starting: source {}, slot {}, tables [{}]",
               walrelay::cli::RedactConninfo(config.source_dsn), config.slot,
               fmt::join(config.tables, ", "));
  walrelay::relay::Relay relay(config);
  g_relay = &relay;
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  walrelay::Status st = relay.Run();
  g_relay = nullptr;
  if (!st.ok()) {
    const int code = walrelay::cli::ExitCodeFor(st);
    spdlog::critical("walrelay stopped (exit {}): {}", code, st.ToString());
    return code;
  }
  spdlog::info("walrelay stopped cleanly");
  return 0;
}

// `walrelay cutover debezium`: the checks of PlanTakeover, then `run` on the same slot.
int RunCutover(walrelay::relay::RelayConfig config, bool dry_run) {
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  (void)walrelay::cli::SetLogFormat(config.log_format);
  // A new slot would start now and miss what the connector had not confirmed.
  config.create_slot = false;
  auto plan = walrelay::relay::PlanTakeover(config);
  if (!plan.ok()) {
    const int code = walrelay::cli::ExitCodeFor(plan.status());
    spdlog::critical("cutover refused (exit {}): {}", code, plan.status().message());
    return code;
  }
  for (const std::string& check : plan->checks) spdlog::info("cutover: ok: {}", check);
  const std::string what = fmt::format(
      "stream slot {} (publication {}) from {}: every transaction committed after the "
      "connector's last confirmation is published to {} (profile {}), keyed by column {}, "
      "event id in header {}; transactions the connector sent but had not confirmed are "
      "sent again",
      config.slot, config.publication, plan->start.ToString(), config.topic_template,
      config.profile, config.columns.aggregate_id, config.header_names.event_id);
  if (dry_run) {
    std::cout << "walrelay cutover debezium --dry-run: every check passed; would " << what
              << "\n";
    return 0;
  }
  spdlog::info("cutover: {}", what);
  return RunRelay(config);
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("walrelay"));
  (void)walrelay::cli::SetLogFormat("text");

  CLI::App app{
      "walrelay: streams a PostgreSQL transactional outbox to Kafka through logical "
      "replication, confirming WAL only after Kafka acked every event."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "walrelay 0.1.0");

  CLI::App* run = app.add_subcommand(
      "run",
      "Stream the outbox tables (and table-less outbox messages) of the source database to "
      "Kafka. Options come from flags, WALRELAY_* environment variables and a TOML file "
      "(--config), in that order of precedence.");
  walrelay::cli::RunOptionBinder binder(run);
  run->footer(walrelay::cli::kRunExitCodesHelp);

  CLI::App* setup = app.add_subcommand(
      "setup",
      "Create (idempotently) the outbox tables, the dead-letter table, the publication and the "
      "slot, and check the server settings. Takes the same options as `run`.");
  walrelay::cli::RunOptionBinder setup_binder(setup);
  bool dry_run = false, no_tables = false;
  setup->add_flag("--dry-run", dry_run, "Print the SQL instead of running it");
  setup->add_flag("--no-tables", no_tables,
                  "Do not create outbox tables (they exist with another schema)");

  CLI::App* cutover = app.add_subcommand(
      "cutover", "Take over the slot of a stopped CDC connector and stream from it.");
  cutover->require_subcommand(1);
  CLI::App* cutover_debezium = cutover->add_subcommand(
      "debezium",
      "Replace a Debezium PostgreSQL connector with the Outbox Event Router: after the "
      "connector is stopped, checks its slot (inactive, valid, pgoutput), publication and "
      "outbox table, then streams from the slot's confirmed_flush_lsn as `run` does, with "
      "the debezium outbox profile unless --outbox-profile says otherwise. Nothing the "
      "connector had not confirmed is lost; what it sent but had not confirmed is sent again. "
      "Never creates a slot. Takes every option of `run`. See "
      "docs/migrating-from-debezium.md.");
  walrelay::cli::RunOptionBinder cutover_binder(cutover_debezium);
  cutover_binder.set_default_profile("debezium");
  bool cutover_dry_run = false;
  cutover_debezium->add_flag("--dry-run", cutover_dry_run,
                             "Check and print what would happen, then exit (reads only)");
  cutover_debezium->footer(walrelay::cli::kRunExitCodesHelp);

  CLI::App* ref = app.add_subcommand(
      "config-reference", "Print the configuration reference (Markdown) generated from the code.");

  walrelay::cli::LagCommand lag(&app);        // `walrelay lag`: src/cli/lag.h
  walrelay::cli::RecordCommand record(&app);  // `walrelay record`: src/cli/record.h
  walrelay::cli::ReplayCommand replay(&app);  // `walrelay replay`

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // --help prints and exits 0; usage errors exit 2
    if (code != 0 && lag.parsed()) return walrelay::cli::kLagExitUnknown;  // check: 3
    return code == 0 ? 0 : 2;
  }

  if (lag.parsed()) return lag.Run();
  if (record.parsed()) return record.Run();
  if (replay.parsed()) return replay.Run();

  if (ref->parsed()) {
    std::cout << walrelay::cli::ConfigurationReference();
    return 0;
  }
  if (setup->parsed()) {
    auto config = setup_binder.Resolve(/*require_kafka=*/false);
    if (!config.ok()) {
      std::cerr << "walrelay setup: " << config.status().message() << "\n";
      return 2;
    }
    (void)walrelay::cli::SetLogFormat(config->log_format);
    walrelay::Status st = walrelay::cli::RunSetup(*config, !no_tables, dry_run);
    if (!st.ok()) {
      std::cerr << "walrelay setup: " << st.ToString() << "\n";
      return 1;
    }
    return 0;
  }
  if (cutover_debezium->parsed()) {
    auto config = cutover_binder.Resolve();
    if (!config.ok()) {
      std::cerr << "walrelay cutover debezium: " << config.status().message() << "\n";
      return 2;
    }
    return RunCutover(*config, cutover_dry_run);
  }
  if (run->parsed()) {
    auto config = binder.Resolve();
    if (!config.ok()) {
      std::cerr << "walrelay run: " << config.status().message() << "\n";
      return 2;
    }
    return RunRelay(*config);
  }
  return 2;
}
