// Inbox tests with walrelay-ledger processes (issue 5 tests 2 and 3). The broker is
// librdkafka's mock cluster hosted by this test process: it listens on loopback TCP, so
// the ledger processes share it exactly as they would share walrelay-devbroker.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "tests/inbox/inbox_test_util.h"

extern char** environ;

namespace walrelay::inbox {
namespace {

using namespace std::chrono_literals;
using testing::Event;
using testing::Payment;
using testing::ProduceAll;
using testing::QueryInt;
using testing::WaitFor;
using walrelay::testing::TestCluster;

struct LedgerStats {
  uint64_t applied = 0, duplicates = 0, dead_lettered = 0, retries = 0;
};

// A walrelay-ledger child: stdout piped (stats lines), stderr inherited.
class Ledger {
 public:
  Ledger(const std::vector<std::string>& args, const std::vector<std::string>& extra_env) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<std::string> argv_s = {WALRELAY_LEDGER_PATH};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s = extra_env;
    for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    stdout_ = out[0];
    fcntl(stdout_, F_SETFL, O_NONBLOCK);
  }
  ~Ledger() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdout_ >= 0) close(stdout_);
  }
  bool started() const { return pid_ > 0; }

  // Reads what the child printed; returns the latest stats line.
  LedgerStats Stats() {
    char buf[4096];
    for (ssize_t n; (n = read(stdout_, buf, sizeof(buf))) > 0;)
      buf_.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = buf_.find('\n')) != std::string::npos;) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      unsigned long long a, d, l, r;
      if (std::sscanf(line.c_str(),
                      "stats applied=%llu duplicates=%llu dead_lettered=%llu retries=%llu", &a, &d,
                      &l, &r) == 4) {
        last_ = {a, d, l, r};
      }
    }
    return last_;
  }

  // Waits for the exit; returns the waitpid status, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        Stats();
        return status;
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }
  int Terminate(std::chrono::milliseconds timeout = 30s) {
    kill(pid_, SIGTERM);
    return Wait(timeout);
  }

 private:
  pid_t pid_ = -1;
  int stdout_ = -1;
  bool exited_ = false;
  std::string buf_;
  LedgerStats last_;
};

class InboxProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pg = TestCluster::Start();
    ASSERT_TRUE(pg.ok()) << pg.status().ToString();
    pg_ = std::move(pg).value();
    auto kafka = kafka::MockCluster::Create(1);
    ASSERT_TRUE(kafka.ok()) << kafka.status().ToString();
    kafka_ = std::move(kafka).value();
    ASSERT_TRUE(kafka_->CreateTopic("payments", 4).ok());
  }

  std::vector<std::string> Args(const std::string& group) {
    return {"--bootstrap",
            kafka_->bootstraps(),
            "--group",
            group,
            "--topic",
            "payments",
            "--conninfo",
            pg_->conninfo(),
            "--consumer",
            "ledger",
            "--replay-window-ms",
            "3600000",
            "--inbox-retention-ms",
            "7200000",
            // The 1 h margin over the window covers a relay lag of at most 1 h
            // (CheckInboxRetention); the default 12 h would refuse to start.
            "--max-relay-lag-ms",
            "3600000",
            "--stats-interval-ms",
            "200",
            "--property",
            "session.timeout.ms=6000",
            "--property",
            "heartbeat.interval.ms=500",
            "--property",
            "auto.commit.interval.ms=500"};
  }

  // Produces events 0..n-1 and returns the expected balance per wallet.
  std::map<std::string, int64_t> ProducePayments(int n, int times) {
    std::vector<Event> events;
    std::map<std::string, int64_t> expected;
    for (int i = 0; i < n; ++i) {
      events.push_back(Payment(i, 50));
      expected["w" + std::to_string(i % 50)] += i + 1;
    }
    for (int t = 0; t < times; ++t) ProduceAll(kafka_->bootstraps(), "payments", events);
    return expected;
  }

  void ExpectLedger(int n, const std::map<std::string, int64_t>& expected) {
    EXPECT_EQ(QueryInt(*pg_, "SELECT count(*) FROM wallet_credit"), n);
    EXPECT_EQ(QueryInt(*pg_, "SELECT count(DISTINCT event_id) FROM wallet_credit"), n);
    auto rows = pg_->Query("SELECT id, balance FROM wallet");
    ASSERT_TRUE(rows.ok());
    ASSERT_EQ(rows->size(), expected.size());
    for (const auto& row : *rows) EXPECT_EQ(std::stoll(*row[1]), expected.at(*row[0])) << *row[0];
  }

  std::unique_ptr<TestCluster> pg_;
  std::unique_ptr<kafka::MockCluster> kafka_;
};

// Issue test 2: two ledger processes in different groups (so both receive every record)
// with the same consumer name race on the same duplicates: each effect exactly once.
TEST_F(InboxProcessTest, TwoProcessesRacingOnDuplicatesApplyOnce) {
  constexpr int kEvents = 2000;
  auto expected = ProducePayments(kEvents, 2);
  Ledger a(Args("group-a"), {});
  Ledger b(Args("group-b"), {});
  ASSERT_TRUE(a.started() && b.started());
  auto seen_all = [](const LedgerStats& s) { return s.applied + s.duplicates >= 2 * kEvents; };
  ASSERT_TRUE(WaitFor([&] { return seen_all(a.Stats()) && seen_all(b.Stats()); }, 120s))
      << "a: " << a.Stats().applied << "+" << a.Stats().duplicates << " b: " << b.Stats().applied
      << "+" << b.Stats().duplicates;
  EXPECT_EQ(a.Terminate(), 0);
  EXPECT_EQ(b.Terminate(), 0);
  const LedgerStats sa = a.Stats(), sb = b.Stats();
  EXPECT_EQ(sa.applied + sb.applied, static_cast<uint64_t>(kEvents));
  EXPECT_EQ(sa.applied + sa.duplicates, 2u * kEvents);
  EXPECT_EQ(sb.applied + sb.duplicates, 2u * kEvents);
  std::printf("applied: a=%llu b=%llu\n", static_cast<unsigned long long>(sa.applied),
              static_cast<unsigned long long>(sb.applied));
  ExpectLedger(kEvents, expected);
}

// Issue test 3: the ledger is SIGKILLed right after a database COMMIT, before that
// message's offset is stored or committed. The restarted ledger (same group) gets the
// message again and the inbox absorbs it.
TEST_F(InboxProcessTest, CrashBetweenDbCommitAndOffsetCommitIsAbsorbed) {
  constexpr int kEvents = 1000;
  auto expected = ProducePayments(kEvents, 1);
  {
    // Small batches: the crash lands after 400 messages committed, long before 1000.
    std::vector<std::string> args = Args("group");
    args.insert(args.end(), {"--batch-max-messages", "20"});
    Ledger crashing(args, {"WALRELAY_INBOX_FAILPOINT=crash_after_db_commit:400"});
    ASSERT_TRUE(crashing.started());
    const int status = crashing.Wait(120s);
    ASSERT_NE(status, -1) << "the failpoint did not fire";
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  }
  const int64_t committed = QueryInt(*pg_, "SELECT count(*) FROM wallet_credit");
  EXPECT_GE(committed, 400);
  EXPECT_LT(committed, kEvents);

  Ledger restarted(Args("group"), {});
  ASSERT_TRUE(restarted.started());
  ASSERT_TRUE(WaitFor(
      [&] { return QueryInt(*pg_, "SELECT count(*) FROM wallet_credit") >= kEvents; }, 120s));
  // Let it finish reading what it was redelivered, then stop it.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto s = restarted.Stats();
        return s.applied + s.duplicates + static_cast<uint64_t>(committed) >=
                   static_cast<uint64_t>(kEvents) &&
               s.applied == static_cast<uint64_t>(kEvents - committed);
      },
      30s));
  EXPECT_EQ(restarted.Terminate(), 0);
  const LedgerStats s = restarted.Stats();
  EXPECT_EQ(s.applied, static_cast<uint64_t>(kEvents - committed));
  EXPECT_GE(s.duplicates, 1u) << "the message committed just before the crash was not redelivered";
  ExpectLedger(kEvents, expected);
}

}  // namespace
}  // namespace walrelay::inbox
