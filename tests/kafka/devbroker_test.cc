// Runs the walrelay-devbroker program: bootstrap line, produce/consume over loopback,
// stdin fault commands, SIGTERM -> exit 0.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "src/kafka/producer.h"
#include "test_consumer.h"

extern char** environ;

namespace walrelay::kafka {
namespace {

using namespace std::chrono_literals;

// A child process with pipes on stdin and stdout.
class Child {
 public:
  bool Start(std::vector<std::string> args) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return false;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
    return rc == 0;
  }

  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdin_ >= 0) close(stdin_);
    if (stdout_ >= 0) close(stdout_);
  }

  // One line from the child's stdout (without '\n'), or "" on timeout/EOF.
  std::string ReadLine(std::chrono::milliseconds timeout = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{stdout_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char tmp[1024];
      ssize_t n = read(stdout_, tmp, sizeof(tmp));
      if (n <= 0) return "";
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }

  std::string Command(const std::string& cmd) {
    std::string line = cmd + "\n";
    if (write(stdin_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return "";
    return ReadLine();
  }

  // Sends `sig` and returns the exit status (or -1).
  int Stop(int sig) {
    kill(pid_, sig);
    int status = 0;
    if (waitpid(pid_, &status, 0) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  std::string buf_;
};

TEST(DevbrokerTest, ServesProduceConsumeAndFaultCommandsUntilSigterm) {
  const std::string bootstrap_file = ::testing::TempDir() + "/devbroker_bootstrap.txt";
  std::remove(bootstrap_file.c_str());
  Child broker;
  ASSERT_TRUE(broker.Start({WALRELAY_DEVBROKER_PATH, "--brokers", "3", "--topic", "orders:3",
                            "--bootstrap-file", bootstrap_file}));
  const std::string line = broker.ReadLine();
  ASSERT_EQ(line.rfind("bootstrap=", 0), 0u) << line;
  const std::string bootstraps = line.substr(10);
  std::string from_file;
  std::getline(std::ifstream(bootstrap_file), from_file);
  EXPECT_EQ(from_file, line);

  std::map<uint64_t, int> ok_reports;
  ProducerOptions options;
  options.properties = {{"bootstrap.servers", bootstraps},
                        {"reconnect.backoff.ms", "20"},
                        {"reconnect.backoff.max.ms", "200"}};
  auto producer = Producer::Create(options, [&](uint64_t cookie, const Status& st, const DeliveredRecord&) {
    EXPECT_TRUE(st.ok()) << st.ToString();
    ++ok_reports[cookie];
  });
  ASSERT_TRUE(producer.ok()) << producer.status().ToString();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE((*producer)->Produce("orders", "k" + std::to_string(i % 4), "v", {}, i).ok());
  }
  ASSERT_TRUE((*producer)->Flush(10s).ok());

  EXPECT_EQ(broker.Command("down all"), "ok");
  for (int i = 20; i < 30; ++i) {
    ASSERT_TRUE((*producer)->Produce("orders", "k" + std::to_string(i % 4), "v", {}, i).ok());
  }
  (*producer)->Poll(500ms);
  EXPECT_EQ(ok_reports.size(), 20u) << "delivered while all brokers were down";
  EXPECT_EQ(broker.Command("up all"), "ok");
  ASSERT_TRUE((*producer)->Flush(20s).ok());
  EXPECT_EQ(ok_reports.size(), 30u);
  for (const auto& [cookie, n] : ok_reports) EXPECT_EQ(n, 1) << cookie;

  auto records = testing::ConsumeAll(bootstraps, "orders", 3, 30, 10s);
  EXPECT_EQ(records.size(), 30u);

  EXPECT_EQ(broker.Command("down 2"), "ok");
  EXPECT_EQ(broker.Command("up 2"), "ok");
  EXPECT_EQ(broker.Command("topic payments 2"), "ok");
  EXPECT_EQ(broker.Command("topic payments 2").rfind("error: ", 0), 0u);
  EXPECT_EQ(broker.Command("down 9").rfind("error: ", 0), 0u);
  EXPECT_EQ(broker.Command("explode").rfind("error: ", 0), 0u);

  producer->reset();
  EXPECT_EQ(broker.Stop(SIGTERM), 0);
}

TEST(DevbrokerTest, HelpAndBadOptions) {
  {
    Child c;
    ASSERT_TRUE(c.Start({WALRELAY_DEVBROKER_PATH, "--help"}));
    std::string first = c.ReadLine();
    EXPECT_NE(first.find("walrelay-devbroker"), std::string::npos) << first;
    EXPECT_EQ(c.Stop(0), 0);  // signal 0: just wait for it
  }
  {
    Child c;
    ASSERT_TRUE(c.Start({WALRELAY_DEVBROKER_PATH, "--topic", "nopartitions"}));
    EXPECT_NE(c.Stop(0), 0);
  }
}

}  // namespace
}  // namespace walrelay::kafka
