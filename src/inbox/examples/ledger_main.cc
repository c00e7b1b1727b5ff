// walrelay-ledger: the inbox library's example service. Consumes payment events and
// credits wallet balances, effectively once (see src/inbox/examples/ledger.h).
//
//   walrelay-ledger --bootstrap HOST:PORT --group ledger --topic payments
//                   --conninfo 'host=... dbname=...'
//
// SIGTERM/SIGINT stop it cleanly (stored offsets committed). With --stats-interval-ms it
// prints `stats applied=A duplicates=D dead_lettered=L retries=R transactions=T rss_bytes=...
// heap_in_use_bytes=... heap_retained_bytes=...` lines on stdout, and always one at exit.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <thread>

#include "base/process_snapshot.h"
#include "src/inbox/examples/ledger.h"
#include "src/inbox/inbox.h"

namespace {

void PrintStats(const walrelay::inbox::InboxStats& s) {
  // The process's memory too: RSS beside the C heap in use and retained tells a leak (in
  // use grows) from the allocator's high-water mark (retained grows): base/process_snapshot.h.
  const walrelay::ProcessSnapshot p = walrelay::ReadProcessSnapshot();
  std::printf(
      "stats applied=%llu duplicates=%llu dead_lettered=%llu retries=%llu transactions=%llu "
      "rss_bytes=%.0f heap_in_use_bytes=%.0f heap_retained_bytes=%.0f\n",
      static_cast<unsigned long long>(s.applied), static_cast<unsigned long long>(s.duplicates),
      static_cast<unsigned long long>(s.dead_lettered), static_cast<unsigned long long>(s.retries),
      static_cast<unsigned long long>(s.transactions), p.resident_bytes, p.heap_in_use_bytes,
      p.heap_retained_bytes);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"walrelay-ledger: credits wallet balances from payment events through the inbox"};
  walrelay::inbox::InboxOptions opt;
  opt.consumer_name = "ledger";
  std::vector<std::string> props;
  int64_t retention_ms = opt.inbox_retention.count();
  int64_t replay_ms = 0;
  int64_t stats_ms = 0;
  int64_t batch_wait_ms = opt.batch_max_wait.count();
  int64_t describe_ms = opt.describe_configs_timeout.count();
  app.add_option("--bootstrap", opt.bootstrap_servers, "Kafka bootstrap servers")->required();
  app.add_option("--group", opt.group_id, "Kafka consumer group")->required();
  app.add_option("--topic", opt.topics, "Topic to consume (repeatable)")->required();
  app.add_option("--conninfo", opt.conninfo, "PostgreSQL connection string")->required();
  std::string password_file;
  app.add_option("--password-file", password_file,
                 "File whose first line is the PostgreSQL password (mode 0600; kept out of "
                 "the connection string)")
      ->envname("WALRELAY_LEDGER_PASSWORD_FILE");
  app.add_option("--consumer", opt.consumer_name, "Logical consumer name (inbox key)")
      ->capture_default_str();
  app.add_option("--dead-letter-topic", opt.dead_letter_topic,
                 "Dead-letter topic (default <consumer>.dlq)");
  app.add_option("--max-connections", opt.max_db_connections, "Database connections")
      ->capture_default_str();
  app.add_option("--inbox-retention-ms", retention_ms, "Inbox row retention, 0 = forever")
      ->capture_default_str();
  app.add_option("--replay-window-ms", replay_ms,
                 "Topic replay window when the broker does not report retention.ms");
  int64_t max_relay_lag_ms = opt.max_relay_lag.count();
  app.add_option("--max-relay-lag-ms", max_relay_lag_ms,
                 "The relay lag to tolerate while this consumer lags by the whole replay "
                 "window: the inbox retention must exceed the window by at least this")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch-max-messages", opt.batch_max_messages,
                 "Messages per database transaction, per partition (1: no batching)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--batch-max-wait-ms", batch_wait_ms,
                 "Wait at most this long for a batch to fill (0: take what is queued)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--describe-configs-timeout-ms", describe_ms,
                 "How long to wait for the broker to describe the topics' retention (the dev "
                 "broker never answers: then --replay-window-ms is used)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--property", props, "librdkafka consumer property KEY=VALUE (repeatable)");
  app.add_option("--stats-interval-ms", stats_ms, "Print stats every N ms (0: only at exit)");
  CLI11_PARSE(app, argc, argv);
  for (const std::string& p : props) {
    auto eq = p.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "walrelay-ledger: --property %s: expected KEY=VALUE\n", p.c_str());
      return 2;
    }
    opt.properties.emplace_back(p.substr(0, eq), p.substr(eq + 1));
  }
  opt.inbox_retention = std::chrono::milliseconds(retention_ms);
  opt.replay_window = std::chrono::milliseconds(replay_ms);
  opt.max_relay_lag = std::chrono::milliseconds(max_relay_lag_ms);
  opt.batch_max_wait = std::chrono::milliseconds(batch_wait_ms);
  opt.describe_configs_timeout = std::chrono::milliseconds(describe_ms);

  // Block the stop signals before any thread starts; a watcher thread turns them into Stop().
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  if (!password_file.empty()) {
    auto password = walrelay::slot::ReadPasswordFile(password_file);
    if (!password.ok()) {
      std::fprintf(stderr, "walrelay-ledger: --password-file: %s\n",
                   password.status().message().c_str());
      return 2;
    }
    opt.password = std::move(*password);
  }
  if (auto st = walrelay::inbox::ledger::EnsureLedgerSchema({opt.conninfo, opt.password});
      !st.ok()) {
    std::fprintf(stderr, "walrelay-ledger: %s\n", st.ToString().c_str());
    return 1;
  }
  auto consumer =
      walrelay::inbox::InboxConsumer::Create(opt, &walrelay::inbox::ledger::CreditWallet);
  if (!consumer.ok()) {
    std::fprintf(stderr, "walrelay-ledger: %s\n", consumer.status().ToString().c_str());
    return 1;
  }
  walrelay::inbox::InboxConsumer& c = **consumer;
  if (auto st = c.EnsureSchema(); !st.ok()) {
    std::fprintf(stderr, "walrelay-ledger: %s\n", st.ToString().c_str());
    return 1;
  }

  std::atomic<bool> done{false};
  std::thread watcher([&] {
    const timespec tick{0, 200'000'000};
    auto last = std::chrono::steady_clock::now();
    while (!done.load()) {
      if (sigtimedwait(&stop_signals, nullptr, &tick) > 0) {
        c.Stop();
        return;
      }
      if (stats_ms > 0 &&
          std::chrono::steady_clock::now() - last >= std::chrono::milliseconds(stats_ms)) {
        last = std::chrono::steady_clock::now();
        PrintStats(c.stats());
      }
    }
  });
  walrelay::Status st = c.Run();
  done = true;
  watcher.join();
  PrintStats(c.stats());
  if (!st.ok()) {
    std::fprintf(stderr, "walrelay-ledger: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
