#include "tests/support/pg_cluster.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

namespace walrelay::testing {
namespace {

std::unique_ptr<TestCluster> MustStart(TestCluster::Options options = {}) {
  auto c = TestCluster::Start(std::move(options));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

TEST(TestClusterTest, StartsWithLogicalWalLevel) {
  auto c = MustStart();
  ASSERT_NE(c, nullptr);
  auto wal_level = c->QueryScalar("SHOW wal_level");
  ASSERT_TRUE(wal_level.ok()) << wal_level.status().ToString();
  EXPECT_EQ(*wal_level, "logical");
  EXPECT_EQ(*c->QueryScalar("SELECT current_user"), "walrelay");
  EXPECT_EQ(*c->QueryScalar("SHOW fsync"), "off");
  EXPECT_EQ(*c->QueryScalar("SHOW port"), std::to_string(c->port()));
  EXPECT_TRUE(std::filesystem::exists(c->data_dir() + "/PG_VERSION"));
}

TEST(TestClusterTest, AppliesExtraSettings) {
  auto c = MustStart({.settings = {"max_slot_wal_keep_size=64MB", "wal_sender_timeout=5s"}});
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(*c->QueryScalar("SHOW max_slot_wal_keep_size"), "64MB");
  EXPECT_EQ(*c->QueryScalar("SHOW wal_sender_timeout"), "5s");
}

TEST(TestClusterTest, RejectsMalformedSetting) {
  auto c = TestCluster::Start({.settings = {"no_equals_sign"}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

TEST(TestClusterTest, ReportsServerLogOnStartupFailure) {
  auto c = TestCluster::Start({.settings = {"no_such_setting_xyz=1"}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("no_such_setting_xyz"), std::string::npos)
      << c.status().ToString();
}

TEST(TestClusterTest, QueryReturnsRowsAndNulls) {
  auto c = MustStart();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(
      c->Exec("CREATE TABLE t (a int, b text); INSERT INTO t VALUES (1, 'x'), (2, NULL)").ok());
  auto rows = c->Query("SELECT a, b FROM t ORDER BY a");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0][0], "1");
  EXPECT_EQ((*rows)[0][1], "x");
  EXPECT_EQ((*rows)[1][1], std::nullopt);
  EXPECT_FALSE(c->Exec("SELECT * FROM missing_table").ok());
  EXPECT_EQ(c->QueryScalar("SELECT 1 WHERE false").status().code(), StatusCode::kNotFound);
}

TEST(TestClusterTest, RestartKeepsDataAndPort) {
  auto c = MustStart();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Exec("CREATE TABLE kept (a int); INSERT INTO kept VALUES (42)").ok());
  const int port = c->port();
  const int old_pid = c->pid();
  ASSERT_TRUE(c->Restart().ok());
  EXPECT_NE(c->pid(), old_pid);
  EXPECT_EQ(c->port(), port);
  EXPECT_EQ(*c->QueryScalar("SELECT a FROM kept"), "42");
  // Crash-style restart too.
  ASSERT_TRUE(c->Restart(TestCluster::StopMode::kImmediate).ok());
  EXPECT_EQ(*c->QueryScalar("SELECT a FROM kept"), "42");
  ASSERT_TRUE(c->Stop().ok());
  EXPECT_FALSE(c->running());
  EXPECT_FALSE(c->Exec("SELECT 1").ok());
  ASSERT_TRUE(c->Restart().ok());
  EXPECT_TRUE(c->Exec("SELECT 1").ok());
}

TEST(TestClusterTest, TwoClustersAtOnce) {
  auto a = MustStart();
  auto b = MustStart();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->port(), b->port());
  EXPECT_NE(a->data_dir(), b->data_dir());
  ASSERT_TRUE(a->Exec("CREATE TABLE only_in_a (x int)").ok());
  EXPECT_TRUE(a->Exec("SELECT * FROM only_in_a").ok());
  EXPECT_FALSE(b->Exec("SELECT * FROM only_in_a").ok());
}

TEST(TestClusterTest, TcpConninfoWorks) {
  auto c = MustStart();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(PQping(c->tcp_conninfo().c_str()), PQPING_OK);
  EXPECT_EQ(PQping(c->replication_conninfo().c_str()), PQPING_OK);
}

TEST(TestClusterTest, DestructorStopsServerAndRemovesDir) {
  std::string dir;
  int pid = -1;
  {
    auto c = MustStart();
    ASSERT_NE(c, nullptr);
    dir = c->socket_dir();
    pid = c->pid();
    ASSERT_TRUE(std::filesystem::exists(dir));
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_NE(::kill(pid, 0), 0);  // reaped: no such process
}

TEST(TestClusterTest, ServerDiesWithItsParent) {
  // A child process starts a cluster, reports the postmaster PID, then is SIGKILLed.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    auto c = TestCluster::Start();
    struct {
      int pid;
      char dir[256];
    } msg{};
    msg.pid = c.ok() ? (*c)->pid() : -1;
    if (c.ok()) (*c)->socket_dir().copy(msg.dir, sizeof msg.dir - 1);
    (void)!::write(fds[1], &msg, sizeof msg);
    ::pause();
    ::_exit(0);
  }
  ::close(fds[1]);
  struct {
    int pid;
    char dir[256];
  } msg{};
  ASSERT_EQ(::read(fds[0], &msg, sizeof msg), static_cast<ssize_t>(sizeof msg));
  ::close(fds[0]);
  const int server_pid = msg.pid;
  ASSERT_GT(server_pid, 0);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = ::kill(server_pid, 0) != 0;
    if (!gone) ::usleep(20000);
  }
  EXPECT_TRUE(gone) << "postmaster " << server_pid << " outlived its parent";
  // The dead parent could not remove its directory; do it here.
  std::error_code ec;
  if (msg.dir[0] != '\0') std::filesystem::remove_all(msg.dir, ec);
}

}  // namespace
}  // namespace walrelay::testing
