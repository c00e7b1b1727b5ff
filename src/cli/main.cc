// walrelay: the command-line program. Subcommands:
//   run               stream the outbox to Kafka (see docs/configuration.md)
//   config-reference  print the configuration reference (Markdown)
//   config from-debezium  translate a Debezium connector configuration (from_debezium.h)
//   lag               every slot's retained WAL and lag; a monitoring check (src/cli/lag.h)
//   record / replay   capture a slot's raw stream; replay it through the pipeline (record.h)
//   cutover debezium  take over a stopped Debezium connector's slot and stream from it
//                     (src/relay/commands/cutover.h, docs/migrating-from-debezium.md)
//   republish         publish outbox rows already in the tables again
//                     (src/relay/commands/republish.h)
//   dead-letters      list the dead letters; retry them once their cause is fixed (redrive.h)
//   audit             reconcile the topics with the outbox tables (src/cli/audit.h)
// Exit codes: 0 success, 1 runtime failure, 2 bad usage or configuration, 3 (run) refused to
// go on without an operator (cli::ExitCodeFor, src/cli/options.h).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include <CLI/CLI.hpp>
#include <atomic>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <csignal>
#include <thread>
#include <unistd.h>
#include <fstream>
#include <iostream>
#include <sstream>

#include "base/json.h"
#include "base/suggest.h"

#include "src/cli/crash_report.h"
#include "src/cli/from_debezium.h"
#include "src/cli/audit.h"
#include "src/cli/lag.h"
#include "src/cli/log_format.h"
#include "src/cli/options.h"
#include "src/cli/record.h"
#include "src/cli/sd_notify.h"
#include "src/cli/setup.h"
#include "src/relay/commands/redrive.h"
#include "src/relay/run/relay.h"
#include "src/relay/commands/republish.h"
#include "src/relay/commands/cutover.h"
#include "walrelay/version.h"

namespace {

walrelay::relay::Relay* g_relay = nullptr;

// The misspelt command or long option a failed parse tripped on, with the closest name
// ("unknown command 'runn'; did you mean run?"), or "" when the failure was something else.
// CLI11 2.1 says only "A subcommand is required" or "arguments were not expected".
std::string MisspeltWord(CLI::App& app, int argc, char** argv) {
  CLI::App* level = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (level->get_require_subcommand_min() > 0) {  // a word here must be a command
      if (arg.starts_with("-")) continue;           // --help, --version
      std::vector<std::string> names;
      CLI::App* next = nullptr;
      for (CLI::App* sub : level->get_subcommands([](CLI::App*) { return true; })) {
        names.push_back(sub->get_name());
        if (sub->get_name() == arg) next = sub;
      }
      if (next == nullptr) {
        return "unknown command '" + arg + "'" + walrelay::DidYouMean(arg, names) +
               " (commands: " + fmt::format("{}", fmt::join(names, ", ")) + ")";
      }
      level = next;
      continue;
    }
    if (!arg.starts_with("--")) continue;
    const std::string flag = arg.substr(0, arg.find('='));
    std::vector<std::string> flags;
    bool known = false;
    for (const CLI::Option* opt : level->get_options()) {
      for (const std::string& name : opt->get_lnames()) {
        flags.push_back("--" + name);
        known = known || flags.back() == flag;
      }
    }
    if (!known) {
      return "unknown option " + flag + walrelay::DidYouMean(flag, flags) + " (`walrelay " +
             level->get_name() + " --help` lists them)";
    }
  }
  return "";
}

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
  // systemd (Type=notify): readiness, status and a watchdog fed by the relay's loops.
  std::atomic<bool> done{false};
  std::thread notifier;
  if (auto sd = walrelay::cli::SystemdNotifier::FromEnvironment()) {
    notifier = std::thread([&relay, &done, &config, sd = std::move(sd)] {
      const auto watchdog = sd->watchdog_interval();
      const auto pet_every = watchdog.count() > 0
                                 ? std::chrono::duration_cast<std::chrono::milliseconds>(watchdog / 2)
                                 : std::chrono::milliseconds(0);
      auto next_pet = std::chrono::steady_clock::now();
      uint64_t ticks_at_pet = relay.stats().loop_ticks.load();
      std::string status;
      bool ready = false;
      while (!done.load()) {
        const bool polling = relay.stats().polling.load() == 1;
        const bool streaming = relay.stats().streaming.load() == 1 || polling;
        const bool standby = relay.stats().standby.load() == 1;
        const bool recovering = relay.stats().recovering.load() == 1;
        const std::string wait = relay.stats().ServerWait();
        const std::string now =
            !wait.empty() ? wait
            : polling     ? std::string("polling the outbox tables")
            : recovering ? "recovering slot " + config.slot + ": republishing " +
                               std::to_string(relay.stats().recovery_rows_expected.load()) +
                               " rows from the outbox tables (progress in the log)"
            : streaming  ? "streaming slot " + config.slot
            : standby ? "standby: slot " + config.slot + " is held by process " +
                            std::to_string(relay.stats().standby_for.load())
                      : "connecting (the log says why not streaming)";
        if (now != status || ((streaming || standby) && !ready)) {
          const bool first_ready = (streaming || standby) && !ready;
          sd->Send(std::string(first_ready ? "READY=1\nSTATUS=" : "STATUS=") + now);
          ready = ready || first_ready;
          status = now;
        }
        if (pet_every.count() > 0 && std::chrono::steady_clock::now() >= next_pet) {
          // Only while the relay's loops advance: a stuck relay is restarted by systemd.
          const uint64_t ticks = relay.stats().loop_ticks.load();
          if (ticks != ticks_at_pet) sd->Send("WATCHDOG=1");
          ticks_at_pet = ticks;
          next_pet = std::chrono::steady_clock::now() + pet_every;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      sd->Send("STOPPING=1");
    });
  }
  walrelay::Status st = relay.Run();
  done.store(true);
  if (notifier.joinable()) notifier.join();
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

int RunRepublish(const walrelay::relay::RelayConfig& config,
                 const walrelay::relay::RepublishRequest& request) {
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  (void)walrelay::cli::SetLogFormat(config.log_format);
  auto result = walrelay::relay::Republish(config, request);
  if (!result.ok()) {
    const int code = walrelay::cli::ExitCodeFor(result.status());
    spdlog::critical("republish failed (exit {}): {}", code, result.status().message());
    return code;
  }
  if (request.dry_run) {
    std::cout << "walrelay republish --dry-run: " << result->rows.expected
              << " rows would be republished\n";
    return 0;
  }
  spdlog::info("republish done: {} rows published, {} dead-lettered, at position {}{}",
               result->rows.published, result->rows.dead_lettered, result->position.ToString(),
               result->slot_created ? "; slot " + config.slot +
                                          " created there: start `walrelay run` to stream from it"
                                    : std::string());
  return 0;
}

int RunListDeadLetters(const walrelay::relay::RelayConfig& config,
                       const walrelay::relay::DeadLetterSelection& selection, bool json) {
  auto letters = walrelay::relay::ListDeadLetters(config, selection);
  if (!letters.ok()) {
    std::cerr << "walrelay dead-letters list: " << letters.status().ToString() << "\n";
    return walrelay::cli::ExitCodeFor(letters.status());
  }
  auto quoted = [](const std::optional<std::string>& v) {
    std::string out;
    if (!v) return std::string("null");
    walrelay::AppendJsonQuoted(&out, *v);
    return out;
  };
  if (!json && !letters->empty()) {
    std::cout << "ID  DEAD_AT  SOURCE  EVENT_ID  AGGREGATE_ID  TOPIC  [RE-DRIVE]  REASON\n";
  }
  for (const auto& l : *letters) {
    if (json) {
      std::cout << "{\"id\":" << l.id << ",\"dead_at\":" << quoted(l.dead_at)
                << ",\"slot\":" << quoted(l.slot) << ",\"source\":" << quoted(l.source)
                << ",\"recovered\":" << (l.recovered ? "true" : "false")
                << ",\"commit_lsn\":" << quoted(l.commit_lsn) << ",\"ordinal\":" << l.ordinal
                << ",\"event_id\":" << quoted(l.event_id)
                << ",\"aggregate_id\":" << quoted(l.aggregate_id)
                << ",\"event_type\":" << quoted(l.event_type) << ",\"topic\":" << quoted(l.topic)
                << ",\"payload_bytes\":" << (l.payload ? l.payload->size() : 0)
                << ",\"reason\":" << quoted(l.reason)
                << ",\"redriven_at\":" << quoted(l.redriven_at)
                << ",\"redrive_outcome\":" << quoted(l.redrive_outcome) << "}\n";
    } else {
      std::cout << l.id << "  " << l.dead_at << "  " << l.source << "  "
                << l.event_id.value_or("-") << "  " << l.aggregate_id.value_or("-") << "  "
                << l.topic.value_or("-") << "  "
                << (l.redrive_outcome ? "re-drive " + *l.redrive_outcome + "  " : std::string())
                << l.reason << "\n";
    }
  }
  if (!json) {
    std::cerr << letters->size() << " dead letters";
    if (!letters->empty()) {
      std::cerr << ". Next: fix each cause (the REASON), then `walrelay dead-letters retry --id "
                   "ID` (or --all): each is rebuilt from its outbox row when the row is still "
                   "there, published, and its outcome recorded. A letter's outbox row: "
                   "SELECT * FROM SOURCE WHERE "
                << (config.columns.event_id.empty() ? std::string("event_id")
                                                    : config.columns.event_id)
                << " = 'EVENT_ID'";
    }
    std::cerr << "\n";
  }
  return 0;
}

int RunRedrive(const walrelay::relay::RelayConfig& config,
               const walrelay::relay::DeadLetterSelection& selection) {
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  auto result = walrelay::relay::RedriveDeadLetters(config, selection);
  if (!result.ok()) {
    const int code = walrelay::cli::ExitCodeFor(result.status());
    spdlog::critical("dead-letters retry failed (exit {}): {}", code, result.status().message());
    return code;
  }
  std::cout << "re-driven: " << result->published << " published";
  if (result->published_again > 0) {
    std::cout << " (" << result->published_again
              << " of them after an attempt whose outcome was unknown: a consumer may see "
                 "those twice)";
  }
  std::cout << ", " << result->failed << " failed again (their new reason is on the letter)";
  if (!result->skipped_attempted.empty()) {
    std::cout << ", " << result->skipped_attempted.size()
              << " skipped: an earlier re-drive produced them without recording the outcome, "
                 "so they may be in Kafka already (ids";
    for (int64_t id : result->skipped_attempted) std::cout << " " << id;
    std::cout << "); check, then retry them with --include-attempted to publish them again "
                 "knowingly";
  }
  std::cout << "\n";
  return result->failed == 0 && result->skipped_attempted.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  walrelay::cli::InstallCrashReport();
#if defined(__GLIBC__)
  // No fastbins in glibc's allocator. librdkafka allocates each record and header while
  // earlier ones wait for acks, then a request buffer large enough to make glibc merge
  // every fastbin chunk (malloc_consolidate); against a real cluster, where acks take
  // milliseconds, that merging was a tenth of the relay's CPU. Without fastbins the small
  // chunks go through the per-thread cache and the bins: 5.67-5.80 -> 5.07 us of CPU per
  // event on three Apache Kafka brokers, the same peak RSS (bench/README.md, round three).
  mallopt(M_MXFAST, 0);
#endif
  spdlog::set_default_logger(spdlog::stderr_color_mt("walrelay"));
  (void)walrelay::cli::SetLogFormat("text");

  CLI::App app{
      "walrelay: streams a PostgreSQL transactional outbox to Kafka through logical "
      "replication, confirming WAL only after Kafka acked every event."};
  app.require_subcommand(1);
  // Line 1: what was built. Line 2: the client libraries loaded now (a walrelay built on
  // Debian 12 runs on a newer librdkafka through LD_LIBRARY_PATH: docs/operations.md).
  app.set_version_flag("--version", [] {
    const int pq = PQlibVersion();  // e.g. 150018 for 15.18
    return "walrelay " WALRELAY_VERSION " (commit " WALRELAY_GIT_COMMIT ")\nlibrdkafka " +
           std::string(rd_kafka_version_str()) + ", libpq " + std::to_string(pq / 10000) + "." +
           std::to_string(pq % 10000);
  });

  CLI::App* run = app.add_subcommand(
      "run",
      "Stream the outbox tables (and table-less outbox messages) of the source database to "
      "Kafka. Options come from flags, WALRELAY_* environment variables and a TOML file "
      "(--config), in that order of precedence.");
  walrelay::cli::RunOptionBinder binder(run);
  run->footer(walrelay::cli::kRunExitCodesHelp);

  CLI::App* setup = app.add_subcommand(
      "setup",
      "Create (idempotently) the dead-letter and progress tables, the publication and the "
      "slot (the outbox tables too with --create-tables), check the server settings, and say "
      "per object whether it existed or was created. Takes the same options as `run`.");
  walrelay::cli::RunOptionBinder setup_binder(setup);
  bool dry_run = false, create_tables = false, no_tables = false;
  setup->add_flag("--dry-run", dry_run, "Print the SQL instead of running it");
  CLI::Option* create_tables_flag = setup->add_flag(
      "--create-tables", create_tables,
      "Create the outbox tables that do not exist, with the documented schema. Without it an "
      "outbox table that does not exist is refused (exit 2, nothing created): a misspelled "
      "--source-table is an error, not a new empty table");
  // Before --create-tables, tables were created unless --no-tables: kept so that old
  // scripts run, now the default.
  setup->add_flag("--no-tables", no_tables, "")->group("")->excludes(create_tables_flag);
  bool audit_index = false;
  setup->add_flag("--audit-index", audit_index,
                  "Also index the created_at column of existing outbox tables (`<table>_created_at`, "
                  "built CONCURRENTLY: writers are not blocked), so `walrelay audit` reads its "
                  "window through it instead of scanning the table; one more index every insert "
                  "maintains. Tables setup creates always get it; partitioned ones need none");
  std::string relay_role;
  setup->add_option("--relay-role", relay_role,
                    "The role `walrelay run` logs in as, when another (the tables' owner) runs "
                    "setup: grants it exactly the table privileges the relay needs (printed "
                    "as GRANTs with --dry-run) and warns when it lacks REPLICATION");

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

  CLI::App* republish = app.add_subcommand(
      "republish",
      "Publish outbox rows that are already in the tables again (under one snapshot, mapped "
      "like streamed rows, marked recovered=1 in walrelay.position; consumers dedup on the "
      "event id), with progress in the log. Choose the rows with exactly one of --all, "
      "--since-id, --since, --event-id, --unpublished. With --create-slot, first creates the relay's slot "
      "with an exported snapshot and republishes the rows of that snapshot, so that "
      "`walrelay run` then streams from the slot with no gap (after a lost or Debezium "
      "slot). Takes every option of `run`.");
  walrelay::cli::RunOptionBinder republish_binder(republish);
  walrelay::relay::RepublishRequest republish_request;
  bool republish_all = false;
  std::string since_id, since_time;
  std::vector<std::string> event_ids;
  bool republish_unpublished = false;
  republish->add_flag("--all", republish_all, "Every row of the outbox tables");
  republish->add_flag("--unpublished", republish_unpublished,
                      "Rows poll mode has not marked published (published_at IS NULL): with "
                      "--create-slot, the switch from poll mode to WAL mode "
                      "(docs/poll-mode.md)");
  republish->add_option("--since-id", since_id,
                        "Rows whose id column (outbox.columns id) is >= this value");
  republish->add_option("--since", since_time,
                        "Rows whose created_at column is >= this timestamp (e.g. "
                        "'2026-12-01 00:00+00')");
  republish->add_option("--event-id", event_ids, "Rows with this event id (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  republish->add_flag("--create-slot", republish_request.create_slot,
                      "Create source.slot (must not exist) with an exported snapshot first and "
                      "republish the rows visible in it; `walrelay run` then streams from it");
  republish->add_flag("--while-relay-runs", republish_request.while_relay_runs,
                      "Republish although a relay reads the slot (old events then interleave "
                      "with new ones of the same aggregates)");
  republish->add_flag("--dry-run", republish_request.dry_run,
                      "Count the rows and print the plan; publish and create nothing");
  int64_t consumer_retention_ms = 0;
  republish->add_option("--consumer-retention-ms", consumer_retention_ms,
                        "The consumers' inbox retention: rows older than it are counted and "
                        "warned about first (an inbox dead-letters such records instead of "
                        "applying them: it can no longer tell whether it applied them)")
      ->check(CLI::NonNegativeNumber);
  republish->footer(
      "Exit codes: 0 every selected row published (or dead-lettered with its reason) and "
      "acked; 1 a failure (rows may have been published, none is lost: run it again); 2 bad "
      "usage or configuration.");

  CLI::App* dead_letters = app.add_subcommand(
      "dead-letters", "The events walrelay could not publish (the dead-letter table).");
  dead_letters->require_subcommand(1);
  CLI::App* dl_list = dead_letters->add_subcommand(
      "list",
      "List dead letters, oldest first: id, time, source, event id, aggregate id, topic, "
      "re-drive outcome, reason. Letters a re-drive published are left out unless "
      "--all-states. Takes the options of `run` (source and dead_letter.table).");
  walrelay::cli::RunOptionBinder dl_list_binder(dl_list);
  CLI::App* dl_retry = dead_letters->add_subcommand(
      "retry",
      "Re-drive dead letters after their cause is fixed (a topic created or allowed, a size "
      "limit raised, a row corrected): each is rebuilt from its outbox row when the row is "
      "still there (else from the letter's fields), published, and its outcome recorded on "
      "the letter (published, or failed with the new reason). Takes the options of `run`.");
  walrelay::cli::RunOptionBinder dl_retry_binder(dl_retry);
  walrelay::relay::DeadLetterSelection dl_selection;
  bool dl_json = false, dl_all = false;
  for (CLI::App* sub : {dl_list, dl_retry}) {
    sub->add_option("--id", dl_selection.ids, "Only this letter (repeatable)")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    sub->add_option("--since", dl_selection.since,
                    "Only letters written at or after this time ('2026-12-01 00:00+00')");
  }
  dl_list->add_flag("--all-states", dl_selection.include_published,
                    "Also letters a re-drive already published");
  dl_list->add_option("--limit", dl_selection.limit, "At most this many (default 1000)");
  dl_list->add_flag("--json", dl_json, "One JSON object per line");
  dl_retry->add_flag("--all", dl_all, "Every letter not yet published (or those --since)");
  dl_retry->add_flag("--include-attempted", dl_selection.include_attempted,
                     "Also letters an earlier retry produced without recording the outcome "
                     "(re-drive 'attempted': a crash or a refused UPDATE in between). They may "
                     "be in Kafka already: a consumer may see them twice (same event id)");

  CLI::App* ref = app.add_subcommand(
      "config-reference", "Print the configuration reference (Markdown) generated from the code.");

  CLI::App* config_cmd = app.add_subcommand("config", "Configuration tools.");
  config_cmd->require_subcommand(1);
  CLI::App* from_debezium = config_cmd->add_subcommand(
      "from-debezium",
      "Translate a Debezium PostgreSQL connector's configuration (Kafka Connect's REST JSON, "
      "the bare config object, or a .properties file) into walrelay's TOML, printed on "
      "stdout: the debezium outbox profile and every setting that maps; each one that does "
      "not becomes a '# not mapped:' comment with the reason (also listed on stderr). "
      "Secrets are never copied. See docs/migrating-from-debezium.md.");
  std::string debezium_file;
  bool from_debezium_strict = false;
  from_debezium->add_option("FILE", debezium_file, "The connector's configuration ('-': stdin)")
      ->required();
  from_debezium->add_flag("--strict", from_debezium_strict,
                          "Exit 1 when a setting could not be mapped (the TOML is printed "
                          "either way)");
  from_debezium->footer(
      "Exit codes: 0 translated (every setting mapped, or said in a comment); 1 with --strict "
      "when a setting was not mapped; 2 the file cannot be read or is not a PostgreSQL "
      "connector's configuration.");

  walrelay::cli::LagCommand lag(&app);        // `walrelay lag`: src/cli/lag.h
  walrelay::cli::RecordCommand record(&app);  // `walrelay record`: src/cli/record.h
  walrelay::cli::ReplayCommand replay(&app);  // `walrelay replay`
  walrelay::cli::AuditCommand audit(&app);    // `walrelay audit`: src/cli/audit.h

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const std::string misspelt =
        e.get_exit_code() != 0 ? MisspeltWord(app, argc, argv) : std::string();
    if (!misspelt.empty()) std::cerr << "walrelay: " << misspelt << "\n";
    const int code = misspelt.empty() ? app.exit(e) : 2;  // --help prints and exits 0
    if (code != 0 && lag.parsed()) return walrelay::cli::kLagExitUnknown;  // check: 3
    return code == 0 ? 0 : 2;
  }

  {
    std::vector<std::string_view> environment;
    for (char** e = environ; *e != nullptr; ++e) environment.emplace_back(*e);
    if (walrelay::Status st = walrelay::cli::CheckWalrelayEnvironment(environment); !st.ok()) {
      std::cerr << "walrelay: " << st.message() << "\n";
      return lag.parsed() ? walrelay::cli::kLagExitUnknown : 2;
    }
  }
  if (lag.parsed()) return lag.Run();
  if (audit.parsed()) return audit.Run();
  if (record.parsed()) return record.Run();
  if (replay.parsed()) return replay.Run();

  if (ref->parsed()) {
    std::cout << walrelay::cli::ConfigurationReference();
    return 0;
  }
  if (from_debezium->parsed()) {
    std::stringstream text;
    if (debezium_file == "-") {
      text << std::cin.rdbuf();
    } else {
      std::ifstream in(debezium_file);
      if (!in) {
        std::cerr << "walrelay config from-debezium: cannot read " << debezium_file << "\n";
        return 2;
      }
      text << in.rdbuf();
    }
    auto translated = walrelay::cli::TranslateDebeziumConfig(text.str());
    if (!translated.ok()) {
      std::cerr << "walrelay config from-debezium: " << translated.status().message() << "\n";
      return 2;
    }
    std::cout << translated->toml;
    for (const std::string& u : translated->unmapped) std::cerr << "not mapped: " << u << "\n";
    std::cerr << translated->unmapped.size() << " settings not mapped"
              << (translated->unmapped.empty() ? "" : " (comments in the TOML say why)") << "\n";
    return from_debezium_strict && !translated->unmapped.empty() ? 1 : 0;
  }
  if (setup->parsed()) {
    auto config = setup_binder.Resolve(/*require_kafka=*/false);
    if (!config.ok()) {
      std::cerr << "walrelay setup: " << config.status().message() << "\n";
      return 2;
    }
    (void)walrelay::cli::SetLogFormat(config->log_format);
    walrelay::Status st = walrelay::cli::RunSetup(*config, create_tables, dry_run, relay_role, audit_index);
    if (!st.ok()) {
      std::cerr << "walrelay setup: " << st.ToString() << "\n";
      return walrelay::cli::ExitCodeFor(st);
    }
    return 0;
  }
  if (dl_list->parsed() || dl_retry->parsed()) {
    const bool retry = dl_retry->parsed();
    if (retry && dl_selection.ids.empty() && !dl_all && dl_selection.since.empty()) {
      std::cerr << "walrelay dead-letters retry: choose the letters: --id N (repeatable), "
                   "--since TIME or --all\n";
      return 2;
    }
    auto config = (retry ? dl_retry_binder : dl_list_binder).Resolve(/*require_kafka=*/retry);
    if (!config.ok()) {
      std::cerr << "walrelay dead-letters: " << config.status().message() << "\n";
      return 2;
    }
    (void)walrelay::cli::SetLogFormat(config->log_format);
    return retry ? RunRedrive(*config, dl_selection) : RunListDeadLetters(*config, dl_selection, dl_json);
  }
  if (republish->parsed()) {
    const int chosen = republish_all + !since_id.empty() + !since_time.empty() +
                       !event_ids.empty() + republish_unpublished;
    if (chosen != 1) {
      std::cerr << "walrelay republish: choose the rows with exactly one of --all, --since-id, "
                   "--since, --event-id, --unpublished\n";
      return 2;
    }
    using Rows = walrelay::relay::RepublishRequest::Rows;
    republish_request.rows = republish_all           ? Rows::kAll
                             : republish_unpublished ? Rows::kUnpublished
                             : !since_id.empty()   ? Rows::kSinceId
                             : !since_time.empty() ? Rows::kSinceTime
                                                   : Rows::kEventIds;
    republish_request.since_id = since_id;
    republish_request.since_time = since_time;
    republish_request.event_ids = event_ids;
    republish_request.consumer_retention = std::chrono::milliseconds(consumer_retention_ms);
    auto config = republish_binder.Resolve(/*require_kafka=*/republish_request.dry_run == false);
    if (!config.ok()) {
      std::cerr << "walrelay republish: " << config.status().message() << "\n";
      return 2;
    }
    return RunRepublish(*config, republish_request);
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
