// walrelay: the command-line program. Subcommands:
//   run               stream the outbox to Kafka (see docs/configuration.md)
//   config-reference  print the configuration reference (Markdown)
//   lag               every slot's retained WAL and lag; a monitoring check (src/cli/lag.h)
//   record / replay   capture a slot's raw stream; replay it through the pipeline (record.h)
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
