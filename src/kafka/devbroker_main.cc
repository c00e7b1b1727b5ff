// walrelay-devbroker: librdkafka's mock Kafka cluster as a process, for local development
// and fault-injection tests. Prints `bootstrap=HOST:PORT,...` once ready, then serves until
// SIGTERM/SIGINT (exit 0). While stdin is open it reads one command per line and answers
// each on stdout with `ok` or `error: <reason>`:
//   down <broker id|all>        disconnect the broker(s) and refuse new connections
//   up <broker id|all>          accept connections again
//   topic <name> <partitions>   create a topic (replication factor min(3, brokers))
//   topic-error <name> <error>  fail every request about the topic with a Kafka error
//                               name (UNKNOWN_TOPIC_OR_PART, TOPIC_AUTHORIZATION_FAILED,
//                               ...), or NO_ERROR to clear it
#include <fmt/format.h>
#include <librdkafka/rdkafka.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "src/kafka/mock_cluster.h"

namespace {

using walrelay::Status;
using walrelay::kafka::MockCluster;

bool ParseInt(std::string_view text, int* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

Status BrokerCommand(MockCluster& cluster, bool down, const std::string& which) {
  if (which == "all") return down ? cluster.SetAllBrokersDown() : cluster.SetAllBrokersUp();
  int id = 0;
  if (!ParseInt(which, &id)) {
    return walrelay::InvalidArgumentError(fmt::format("bad broker id '{}'", which));
  }
  return down ? cluster.SetBrokerDown(id) : cluster.SetBrokerUp(id);
}

int ReplicationFactor(const MockCluster& cluster) { return std::min(3, cluster.broker_count()); }

Status Execute(MockCluster& cluster, const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  if (words.empty()) return walrelay::InvalidArgumentError("empty command");
  const std::string& cmd = words[0];
  if ((cmd == "down" || cmd == "up") && words.size() == 2) {
    return BrokerCommand(cluster, cmd == "down", words[1]);
  }
  if (cmd == "topic" && words.size() == 3) {
    int partitions = 0;
    if (!ParseInt(words[2], &partitions)) {
      return walrelay::InvalidArgumentError(fmt::format("bad partition count '{}'", words[2]));
    }
    return cluster.CreateTopic(words[1], partitions, ReplicationFactor(cluster));
  }
  if (cmd == "topic-error" && words.size() == 3) {
    // librdkafka has names for codes, not codes for names: look the name up.
    const struct rd_kafka_err_desc* descs = nullptr;
    size_t count = 0;
    rd_kafka_get_err_descs(&descs, &count);
    for (size_t i = 0; i < count; ++i) {
      if (descs[i].name != nullptr && words[2] == descs[i].name) {
        cluster.SetTopicError(words[1], descs[i].code);
        return Status::Ok();
      }
    }
    return walrelay::InvalidArgumentError(fmt::format("unknown Kafka error name '{}'", words[2]));
  }
  return walrelay::InvalidArgumentError(fmt::format(
      "unknown command '{}' (expected: down <id|all>, up <id|all>, topic <name> <partitions>, "
      "topic-error <name> <error name>)",
      line));
}

void Answer(const Status& st) {
  if (st.ok()) {
    std::fputs("ok\n", stdout);
  } else {
    std::fprintf(stdout, "error: %s\n", st.message().c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "walrelay-devbroker: an in-process mock Kafka cluster (librdkafka rdkafka_mock) for\n"
      "development and fault tests. Not a real broker: no persistence, and each partition\n"
      "keeps only its newest ~5 MB (librdkafka's mock drops older records as a short\n"
      "retention would; a consumer that starts late never sees them): give large runs\n"
      "enough partitions.\n"
      "Prints 'bootstrap=HOST:PORT,...' on stdout when ready and serves until SIGTERM or\n"
      "SIGINT (exit 0). While stdin is open, reads commands, one per line, answering 'ok'\n"
      "or 'error: ...':\n"
      "  down <broker id|all>       disconnect broker(s), refuse new connections\n"
      "  up <broker id|all>         accept connections again\n"
      "  topic <name> <partitions>  create a topic\n"
      "  topic-error <name> <error> fail requests about the topic with a Kafka error name\n"
      "                             (UNKNOWN_TOPIC_OR_PART, TOPIC_AUTHORIZATION_FAILED, ...;\n"
      "                             NO_ERROR clears it)\n"
      "Topics not created explicitly are auto-created on first use with 4 partitions (fixed\n"
      "by librdkafka 2.0.2's mock)."};
  int brokers = 3;
  std::vector<std::string> topics;
  std::string bootstrap_file;
  app.add_option("--brokers", brokers, "Number of brokers (ids 1..N)")
      ->check(CLI::Range(1, 32))
      ->capture_default_str();
  app.add_option("--topic", topics, "Create topic NAME with PARTITIONS partitions (repeatable)")
      ->type_name("NAME:PARTITIONS");
  app.add_option("--bootstrap-file", bootstrap_file,
                 "Also write the bootstrap line to this file (once ready)");
  CLI11_PARSE(app, argc, argv);

  // Block the stop signals before any thread starts, so only our signalfd sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  int sig_fd = signalfd(-1, &stop_signals, SFD_CLOEXEC);
  if (sig_fd < 0) {
    std::perror("walrelay-devbroker: signalfd");
    return 1;
  }

  auto cluster_or = MockCluster::Create(brokers);
  if (!cluster_or.ok()) {
    std::fprintf(stderr, "walrelay-devbroker: %s\n", cluster_or.status().ToString().c_str());
    return 1;
  }
  MockCluster& cluster = **cluster_or;

  for (const std::string& spec : topics) {
    const auto colon = spec.rfind(':');
    int partitions = 0;
    if (colon == std::string::npos || colon == 0 ||
        !ParseInt(std::string_view(spec).substr(colon + 1), &partitions)) {
      std::fprintf(stderr, "walrelay-devbroker: --topic %s: expected NAME:PARTITIONS\n",
                   spec.c_str());
      return 2;
    }
    Status st = cluster.CreateTopic(spec.substr(0, colon), partitions, ReplicationFactor(cluster));
    if (!st.ok()) {
      std::fprintf(stderr, "walrelay-devbroker: %s\n", st.ToString().c_str());
      return 1;
    }
  }

  const std::string line = "bootstrap=" + cluster.bootstraps();
  if (!bootstrap_file.empty()) {
    // Write then rename, so a watcher never reads a partial line.
    const std::string tmp = bootstrap_file + ".tmp";
    std::ofstream(tmp) << line << '\n';
    if (std::rename(tmp.c_str(), bootstrap_file.c_str()) != 0) {
      std::perror("walrelay-devbroker: --bootstrap-file");
      return 1;
    }
  }
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);

  bool stdin_open = true;
  std::string pending;
  for (;;) {
    pollfd fds[2] = {{sig_fd, POLLIN, 0}, {stdin_open ? 0 : -1, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      std::perror("walrelay-devbroker: poll");
      return 1;
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      if (read(sig_fd, &info, sizeof(info)) == sizeof(info) && info.ssi_signo == SIGPIPE) {
        continue;  // the reader of stdout went away; keep serving
      }
      break;
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[4096];
      ssize_t n = read(0, buf, sizeof(buf));
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        stdin_open = false;  // EOF: keep serving until a signal
        continue;
      }
      pending.append(buf, static_cast<size_t>(n));
      for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
        std::string cmd = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (!cmd.empty() && cmd.back() == '\r') cmd.pop_back();
        if (cmd.find_first_not_of(" \t") == std::string::npos) continue;
        Answer(Execute(cluster, cmd));
      }
    }
  }
  close(sig_fd);
  return 0;
}
