// TLS to PostgreSQL, for real (issue 13): a throwaway CA and server certificate made with
// the openssl tool, a server with ssl=on that accepts TCP only as hostssl with
// scram-sha-256, and the `walrelay` program connecting with sslmode=verify-full and a
// password from a file: it streams, with no transport warning. The same server under
// another CA's root certificate, or without TLS, is refused with the reason.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "src/kafka/mock_cluster.h"
#include "src/relay/core/schema.h"
#include "tests/kafka/test_consumer.h"
#include "tests/support/pg_cluster.h"
#include "tests/support/slot_wait.h"
#include "tests/support/subprocess.h"

namespace walrelay::relay {
namespace {

using namespace std::chrono_literals;
using testing::Subprocess;

bool Shell(const std::string& command) { return std::system(command.c_str()) == 0; }


class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Shell("command -v openssl >/dev/null 2>&1")) {
      GTEST_SKIP() << "openssl is not installed (scripts/install-deps.sh installs it)";
    }
    auto pg = testing::TestCluster::Start({});
    ASSERT_TRUE(pg.ok()) << pg.status().ToString();
    pg_ = std::move(*pg);
    dir_ = pg_->socket_dir() + "/tls";
    ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0);
    // Two CAs: the server's, and another one that signed nothing the server shows.
    const std::string d = dir_;
    ASSERT_TRUE(Shell("cd " + d + " && " +
                    "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext && "
                    "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt "
                    "-days 2 -subj '/CN=walrelay test CA' >/dev/null 2>&1 && "
                    "openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.crt "
                    "-days 2 -subj '/CN=another CA' >/dev/null 2>&1 && "
                    "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr "
                    "-subj '/CN=localhost' >/dev/null 2>&1 && "
                    "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
                    "-out server.crt -days 2 -extfile san.ext >/dev/null 2>&1"));
    // The server's key belongs to the server's user, readable by it alone.
    struct stat data {};
    ASSERT_EQ(::stat(pg_->data_dir().c_str(), &data), 0);
    for (const char* f : {"server.key", "server.crt"}) {
      const std::string path = d + "/" + f;
      ASSERT_EQ(::chown(path.c_str(), data.st_uid, data.st_gid), 0) << path;
      ASSERT_EQ(::chmod(path.c_str(), 0600), 0) << path;
    }
    // TCP only with TLS and a SCRAM password; the unix socket stays open for the test.
    {
      std::ofstream hba(pg_->data_dir() + "/pg_hba.conf", std::ios::trunc);
      hba << "local all all trust\nlocal replication all trust\n"
          << "hostssl all all 127.0.0.1/32 scram-sha-256\n"
          << "hostssl replication all 127.0.0.1/32 scram-sha-256\n";
    }
    ASSERT_TRUE(pg_->Exec("ALTER SYSTEM SET ssl = on").ok());
    ASSERT_TRUE(pg_->Exec("ALTER SYSTEM SET ssl_cert_file = '" + d + "/server.crt'").ok());
    ASSERT_TRUE(pg_->Exec("ALTER SYSTEM SET ssl_key_file = '" + d + "/server.key'").ok());
    ASSERT_TRUE(pg_->Exec("ALTER ROLE walrelay PASSWORD 'tls-SECRET-pw'").ok());
    ASSERT_TRUE(pg_->Exec("SELECT pg_reload_conf()").ok());
    bool on = false;
    for (int i = 0; i < 100 && !on; ++i) {
      auto v = pg_->QueryScalar("SHOW ssl");
      on = v.ok() && *v == "on";
      if (!on) std::this_thread::sleep_for(50ms);
    }
    ASSERT_TRUE(on) << pg_->ServerLogTail();
    password_file_ = d + "/password";
    {
      std::ofstream pw(password_file_);
      pw << "tls-SECRET-pw\n";
    }
    ASSERT_EQ(::chmod(password_file_.c_str(), 0600), 0);
    log_ = d + "/walrelay.log";
  }

  std::string Dsn(const std::string& extra) const {
    return "host=127.0.0.1 port=" + std::to_string(pg_->port()) +
           " user=walrelay dbname=postgres " + extra;
  }

  std::unique_ptr<testing::TestCluster> pg_;
  std::string dir_, password_file_, log_;
};

TEST_F(TlsTest, RelayStreamsOverVerifiedTlsWithAPasswordFile) {
  ASSERT_TRUE(pg_->Exec(OutboxTableDdl("public.outbox")).ok());
  auto kc = kafka::MockCluster::Create(1);
  ASSERT_TRUE(kc.ok());
  ASSERT_TRUE((*kc)->CreateTopic("outbox.payment", 1, 1).ok());
  auto relay = Subprocess::Start(
      {WALRELAY_BINARY, "run", "--source-dsn",
       Dsn("sslmode=verify-full sslrootcert=" + dir_ + "/ca.crt"), "--source-password-file",
       password_file_, "--kafka-bootstrap-servers", (*kc)->bootstraps(),
       "--flow-status-interval-ms", "100"},
      log_);
  ASSERT_TRUE(relay.ok());
  std::string streaming;
  for (int i = 0; i < 300 && streaming.empty(); ++i) {
    std::this_thread::sleep_for(50ms);
    auto v = pg_->QueryScalar(
        "SELECT ssl FROM pg_stat_ssl s JOIN pg_stat_replication r USING (pid)");
    if (v.ok()) streaming = *v;
  }
  ASSERT_EQ(streaming, "t") << "no TLS walsender; log:\n" << relay->LogTail();
  ASSERT_TRUE(pg_->Exec("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) "
                        "VALUES ('payment', 'a', 'Paid', '{}')")
                  .ok());
  ASSERT_TRUE(testing::WaitConfirmedPastCurrent(*pg_, 30s)) << relay->LogTail();
  EXPECT_EQ(kafka::testing::ConsumeAll((*kc)->bootstraps(), "outbox.payment", 1, 1, 20s).size(),
            1u);
  relay->Signal(SIGTERM);
  EXPECT_EQ(relay->Wait(30s), 0) << relay->LogTail();
  const std::string log = testing::ReadFile(log_);
  EXPECT_EQ(log.find("not encrypted"), std::string::npos) << log;
  EXPECT_EQ(log.find("not verified"), std::string::npos) << log;
  EXPECT_EQ(log.find("tls-SECRET-pw"), std::string::npos) << "the password reached the log";
}

TEST_F(TlsTest, AnotherCaOrNoTlsIsRefusedWithTheReason) {
  // The server's certificate does not verify under another CA's root.
  auto wrong = Subprocess::Start({WALRELAY_BINARY, "lag", "--dsn",
                                  Dsn("sslmode=verify-full sslrootcert=" + dir_ + "/other.crt"),
                                  "--password-file", password_file_},
                                 log_);
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->Wait(30s), 3);  // lag: cannot connect
  std::string log = testing::ReadFile(log_);
  EXPECT_NE(log.find("certificate verify failed"), std::string::npos) << log;

  // The relay itself refuses it too: it never streams, and says why (it retries, as it
  // does for any connection failure, until stopped).
  ::unlink(log_.c_str());
  auto kc = kafka::MockCluster::Create(1);
  ASSERT_TRUE(kc.ok());
  auto relay = Subprocess::Start(
      {WALRELAY_BINARY, "run", "--source-dsn",
       Dsn("sslmode=verify-full sslrootcert=" + dir_ + "/other.crt"), "--source-password-file",
       password_file_, "--kafka-bootstrap-servers", (*kc)->bootstraps()},
      log_);
  ASSERT_TRUE(relay.ok());
  for (int i = 0; i < 600; ++i) {
    log = testing::ReadFile(log_);
    if (log.find("certificate verify failed") != std::string::npos || !relay->running()) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_NE(log.find("certificate verify failed"), std::string::npos) << relay->LogTail();
  EXPECT_EQ(*pg_->QueryScalar("SELECT count(*) FROM pg_stat_replication"), "0");
  EXPECT_EQ(*pg_->QueryScalar("SELECT count(*) FROM pg_replication_slots"), "0");
  if (relay->running()) relay->Signal(SIGTERM);
  const std::optional<int> code = relay->Wait(30s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(testing::ReadFile(log_).find("tls-SECRET-pw"), std::string::npos);

  // Without TLS the server has no entry for the connection.
  ::unlink(log_.c_str());
  auto plain = Subprocess::Start(
      {WALRELAY_BINARY, "lag", "--dsn", Dsn("sslmode=disable"), "--password-file", password_file_},
      log_);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->Wait(30s), 3);
  log = testing::ReadFile(log_);
  EXPECT_NE(log.find("no encryption"), std::string::npos) << log;
  EXPECT_EQ(log.find("tls-SECRET-pw"), std::string::npos);
}

}  // namespace
}  // namespace walrelay::relay
