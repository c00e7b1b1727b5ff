// Integration tests of ReplicationConnection against a throwaway PostgreSQL (TestCluster).
// Payloads are checked only by their pgoutput message type byte; decoding is decoder/'s.
#include "slot/replication_connection.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "base/sql.h"
#include "tests/support/pg_cluster.h"
#include "tests/support/tcp_proxy.h"

namespace walrelay::slot {
namespace {

using std::chrono::milliseconds;
using testing::TestCluster;

const std::vector<std::pair<std::string, std::string>> kPgoutputOptions = {
    {"proto_version", "1"}, {"publication_names", "p"}, {"messages", "true"}};

// end_lsn of a pgoutput Commit: 'C' flags:int8 commit_lsn:int64 end_lsn:int64 ts:int64.
Lsn CommitEndLsn(std::string_view payload) {
  uint64_t v = 0;
  for (size_t i = 10; i < 18 && i < payload.size(); ++i) {
    v = (v << 8) | static_cast<uint8_t>(payload[i]);
  }
  return Lsn(v);
}

// Reads until a pgoutput Commit arrives; returns the type bytes seen and the last Commit.
struct Txn {
  std::string types;  // e.g. "BRIIC"
  Lsn end_lsn;
};
Result<Txn> ReadTransaction(ReplicationConnection& conn,
                            milliseconds budget = milliseconds(15000)) {
  Txn txn;
  const auto deadline = std::chrono::steady_clock::now() + budget;
  while (std::chrono::steady_clock::now() < deadline) {
    WALRELAY_ASSIGN_OR_RETURN(Frame f, conn.Read(milliseconds(200)));
    if (f.kind == Frame::Kind::kKeepalive && f.keepalive.reply_requested) {
      WALRELAY_RETURN_IF_ERROR(conn.SendStatus(Lsn(), Lsn(), Lsn()));
    }
    if (f.kind == Frame::Kind::kEndOfStream) return UnavailableError("end of stream");
    if (f.kind != Frame::Kind::kXLogData) continue;
    if (f.xlog.data.empty()) return DataLossError("empty XLogData");
    txn.types += f.xlog.data[0];
    if (f.xlog.data[0] == 'C') {
      if (f.xlog.data.size() != 26) return DataLossError("Commit of unexpected size");
      txn.end_lsn = CommitEndLsn(f.xlog.data);
      return txn;
    }
  }
  return DeadlineExceededError("no Commit within the budget; saw '" + txn.types + "'");
}

class ReplicationConnectionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto c = TestCluster::Start();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(c).value().release();
    ASSERT_TRUE(cluster_
                    ->Exec("CREATE TABLE t (id int PRIMARY KEY, v text);"
                           "CREATE PUBLICATION p FOR TABLE t;"
                           "CREATE ROLE norepl LOGIN;")
                    .ok());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  std::unique_ptr<ReplicationConnection> MustConnect() {
    auto conn = ReplicationConnection::Connect(cluster_->replication_conninfo());
    EXPECT_TRUE(conn.ok()) << conn.status().ToString();
    return conn.ok() ? std::move(conn).value() : nullptr;
  }

  Result<Lsn> ConfirmedFlush(const std::string& slot) {
    WALRELAY_ASSIGN_OR_RETURN(
        std::string text,
        cluster_->QueryScalar("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                              "WHERE slot_name = '" +
                              slot + "'"));
    auto lsn = Lsn::Parse(text);
    if (!lsn) return InternalError("bad lsn " + text);
    return *lsn;
  }

  static TestCluster* cluster_;
};
TestCluster* ReplicationConnectionTest::cluster_ = nullptr;

TEST_F(ReplicationConnectionTest, IdentifySystemOverSocketAndTcp) {
  // replication=database is forced even when the conninfo lacks it.
  for (const std::string& ci : {cluster_->conninfo(), cluster_->tcp_conninfo()}) {
    auto conn = ReplicationConnection::Connect(ci);
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    auto id = (*conn)->IdentifySystem();
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    EXPECT_EQ(id->dbname, "postgres");
    EXPECT_EQ(id->timeline, 1u);
    EXPECT_TRUE(id->xlog_pos.valid());
    EXPECT_FALSE(id->system_id.empty());
    EXPECT_EQ((*conn)->user(), "walrelay");
    EXPECT_TRUE((*conn)->Close().ok());
    EXPECT_TRUE((*conn)->Close().ok());  // idempotent
  }
}

TEST_F(ReplicationConnectionTest, StreamsATransactionAndConfirmsItsEnd) {
  auto conn = MustConnect();
  ASSERT_NE(conn, nullptr);
  auto slot = conn->CreateLogicalSlot("stream_slot", "pgoutput", /*temporary=*/false);
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();
  EXPECT_EQ(slot->slot_name, "stream_slot");
  EXPECT_EQ(slot->output_plugin, "pgoutput");
  EXPECT_TRUE(slot->consistent_point.valid());
  EXPECT_TRUE(slot->snapshot_name.empty());

  ASSERT_TRUE(cluster_
                  ->Exec("BEGIN; INSERT INTO t VALUES (1, 'a'); INSERT INTO t VALUES (2, 'b');"
                         "COMMIT;")
                  .ok());
  ASSERT_TRUE(conn->StartLogical("stream_slot", Lsn(), kPgoutputOptions).ok());
  EXPECT_TRUE(conn->streaming());
  auto txn = ReadTransaction(*conn);
  ASSERT_TRUE(txn.ok()) << txn.status().ToString();
  EXPECT_EQ(txn->types, "BRIIC");
  ASSERT_TRUE(txn->end_lsn.valid());
  ASSERT_GT(txn->end_lsn, slot->consistent_point);

  auto before = ConfirmedFlush("stream_slot");
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_LT(*before, txn->end_lsn);

  ASSERT_TRUE(conn->SendStatus(txn->end_lsn, txn->end_lsn, txn->end_lsn).ok());
  Lsn confirmed;
  for (int i = 0; i < 100; ++i) {
    auto f = conn->Read(milliseconds(50));  // keeps the socket serviced
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    auto c = ConfirmedFlush("stream_slot");
    ASSERT_TRUE(c.ok());
    confirmed = *c;
    if (confirmed >= txn->end_lsn) break;
  }
  EXPECT_EQ(confirmed, txn->end_lsn);
  EXPECT_TRUE(conn->Close().ok());

  // Reconnecting from 0/0 resumes after the confirmed transaction: only the new row.
  ASSERT_TRUE(cluster_->Exec("INSERT INTO t VALUES (3, 'c')").ok());
  auto again = MustConnect();
  ASSERT_NE(again, nullptr);
  ASSERT_TRUE(again->StartLogical("stream_slot", Lsn(), kPgoutputOptions).ok());
  auto next = ReadTransaction(*again);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->types, "BRIC");  // Relation is re-sent on a new connection
  EXPECT_GT(next->end_lsn, txn->end_lsn);
  EXPECT_TRUE(again->Close().ok());
  EXPECT_TRUE(MustConnect()->DropSlot("stream_slot").ok());
}

// A caller that reads a burst with Read(0) until nothing is buffered (the relay's pipeline
// does) has not seen the stream stop: its next waiting Read() still takes what the socket
// holds and may nap before sleeping on the socket. Read(0) used to mark the stream
// stopped, so `walrelay run` slept on the socket at every catch-up of a drain.
TEST_F(ReplicationConnectionTest, ABurstReadWithoutWaitingLeavesTheStreamMoving) {
  auto conn = MustConnect();
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(conn->CreateLogicalSlot("moving_slot", "pgoutput", /*temporary=*/true).ok());
  ASSERT_TRUE(cluster_->Exec("INSERT INTO t VALUES (40, 'a'), (41, 'b'), (42, 'c')").ok());
  ASSERT_TRUE(conn->StartLogical("moving_slot", Lsn(), kPgoutputOptions).ok());
  EXPECT_FALSE(conn->moving());
  auto txn = ReadTransaction(*conn);
  ASSERT_TRUE(txn.ok()) << txn.status().ToString();
  EXPECT_EQ(txn->types, "BRIIIC");
  EXPECT_TRUE(conn->moving());
  // Everything the server sent is in (its keepalive after catching up too); read without
  // waiting until nothing is buffered.
  std::this_thread::sleep_for(milliseconds(100));
  for (;;) {
    auto f = conn->Read(milliseconds(0));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_NE(f->kind, Frame::Kind::kXLogData) << "nothing was written after the transaction";
    if (f->kind == Frame::Kind::kTimeout) break;
  }
  EXPECT_TRUE(conn->moving()) << "Read(0) returned at once; nothing slept on the socket";
  // A waiting read that finds nothing has slept on the socket: now the stream has stopped.
  // (A keepalive the server sends meanwhile is taken first, without sleeping: read on until
  // a read times out.)
  for (;;) {
    auto f = conn->Read(milliseconds(20));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_NE(f->kind, Frame::Kind::kXLogData) << "nothing was written after the transaction";
    if (f->kind == Frame::Kind::kTimeout) break;
  }
  EXPECT_FALSE(conn->moving());
  EXPECT_TRUE(conn->Close().ok());
}

TEST_F(ReplicationConnectionTest, LogicalMessagesArrive) {
  auto conn = MustConnect();
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(conn->CreateLogicalSlot("msg_slot", "pgoutput", /*temporary=*/true).ok());
  ASSERT_TRUE(
      cluster_->Exec("BEGIN; SELECT pg_logical_emit_message(true, 'outbox', 'hi'); COMMIT;").ok());
  ASSERT_TRUE(conn->StartLogical("msg_slot", Lsn(), kPgoutputOptions).ok());
  auto txn = ReadTransaction(*conn);
  ASSERT_TRUE(txn.ok()) << txn.status().ToString();
  EXPECT_EQ(txn->types, "BMC");
}

TEST_F(ReplicationConnectionTest, SecondReaderOfAnActiveSlotIsFailedPrecondition) {
  auto first = MustConnect();
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->CreateLogicalSlot("busy_slot", "pgoutput", /*temporary=*/false).ok());
  ASSERT_TRUE(first->StartLogical("busy_slot", Lsn(), kPgoutputOptions).ok());
  ASSERT_TRUE(first->Read(milliseconds(100)).ok());

  auto second = MustConnect();
  ASSERT_NE(second, nullptr);
  Status st = second->StartLogical("busy_slot", Lsn(), kPgoutputOptions);
  ASSERT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("is active for PID " + std::to_string(first->backend_pid())),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("another walrelay (or client) is reading it"), std::string::npos);
  EXPECT_FALSE(second->streaming());

  // Once the first reader is gone, the second may take over (the fence opens).
  ASSERT_TRUE(first->Close().ok());
  Status took_over;
  for (int i = 0; i < 50; ++i) {
    auto retry = MustConnect();
    took_over = retry->StartLogical("busy_slot", Lsn(), kPgoutputOptions);
    if (took_over.ok()) {
      EXPECT_TRUE(retry->Close().ok());
      break;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(took_over.ok()) << took_over.ToString();
  EXPECT_TRUE(MustConnect()->DropSlot("busy_slot", /*wait=*/true).ok());
}

TEST_F(ReplicationConnectionTest, MissingSlotIsNotFound) {
  auto conn = MustConnect();
  ASSERT_NE(conn, nullptr);
  Status st = conn->StartLogical("no_such_slot", Lsn(), kPgoutputOptions);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find("no_such_slot"), std::string::npos);
  EXPECT_EQ(MustConnect()->DropSlot("no_such_slot").code(), StatusCode::kNotFound);
}

TEST_F(ReplicationConnectionTest, ExistingSlotIsAlreadyExists) {
  auto conn = MustConnect();
  ASSERT_TRUE(conn->CreateLogicalSlot("dup_slot", "pgoutput", /*temporary=*/true).ok());
  auto other = MustConnect();
  auto dup = other->CreateLogicalSlot("dup_slot", "pgoutput", /*temporary=*/true);
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists) << dup.status().ToString();
}

TEST_F(ReplicationConnectionTest, ExportedSnapshotHasAName) {
  auto conn = MustConnect();
  auto slot = conn->CreateLogicalSlot("snap_slot", "pgoutput", /*temporary=*/true,
                                      /*export_snapshot=*/true);
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();
  EXPECT_FALSE(slot->snapshot_name.empty());
}

TEST_F(ReplicationConnectionTest, RoleWithoutReplicationIsPermissionDenied) {
  auto conn = ReplicationConnection::Connect(cluster_->conninfo_for_user("norepl"));
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), StatusCode::kPermissionDenied) << conn.status().ToString();
  EXPECT_NE(conn.status().message().find("ALTER ROLE norepl REPLICATION"), std::string::npos)
      << conn.status().message();
}

TEST_F(ReplicationConnectionTest, BadNamesAreInvalidArgument) {
  auto conn = MustConnect();
  EXPECT_EQ(conn->CreateLogicalSlot("Bad-Name", "pgoutput", true).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(conn->CreateLogicalSlot("ok", "pg output", true).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(conn->StartLogical("ok", Lsn(), {{"bad name", "x"}}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(conn->Read(milliseconds(0)).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(conn->SendStatus(Lsn(), Lsn(), Lsn()).code(), StatusCode::kFailedPrecondition);
}

// The password from a file travels apart from the DSN, as libpq's own keyword (issue 13):
// a password with every character a DSN gives meaning to authenticates over SCRAM through
// a keyword/value DSN, a URI, and a URI that carries another password (ours wins), on a
// SQL and on a walsender connection; a wrong one is refused without being echoed.
TEST_F(ReplicationConnectionTest, PasswordTravelsApartFromTheDsnInEveryForm) {
  const std::string password = "p a'ss\\w&o=r#d%?/@:\xc3\xa9 x=y";
  ASSERT_TRUE(cluster_->Exec("CREATE ROLE pwuser LOGIN REPLICATION PASSWORD " +
                             QuoteLiteral(password))
                  .ok());
  {
    const std::string hba = cluster_->data_dir() + "/pg_hba.conf";
    std::ifstream in(hba);
    std::stringstream old;
    old << in.rdbuf();
    in.close();
    std::ofstream out(hba, std::ios::trunc);
    out << "host all pwuser 127.0.0.1/32 scram-sha-256\n"
        << "host replication pwuser 127.0.0.1/32 scram-sha-256\n"
        << old.str();
  }
  ASSERT_TRUE(cluster_->Exec("SELECT pg_reload_conf()").ok());
  const std::string port = std::to_string(cluster_->port());
  for (const std::string& dsn :
       {"host=127.0.0.1 port=" + port + " user=pwuser dbname=postgres",
        "postgresql://pwuser@127.0.0.1:" + port + "/postgres?sslmode=disable",
        "postgresql://pwuser:not%20this%20one@127.0.0.1:" + port + "/postgres"}) {
    // pg_reload_conf() is asynchronous: the first form waits for the new pg_hba.conf.
    Result<PgConnPtr> sql = UnavailableError("not tried");
    for (int i = 0; i < 100; ++i) {
      sql = ConnectPg(ConnInfo{dsn, password}, "false", "test");
      if (sql.ok()) break;
      std::this_thread::sleep_for(milliseconds(50));
    }
    ASSERT_TRUE(sql.ok()) << dsn << ": " << sql.status().ToString();
    auto walsender = ReplicationConnection::Connect(ConnInfo{dsn, password});
    ASSERT_TRUE(walsender.ok()) << dsn << ": " << walsender.status().ToString();
    EXPECT_TRUE((*walsender)->IdentifySystem().ok()) << dsn;

    auto wrong = ConnectPg(ConnInfo{dsn, "wrong-SECRET"}, "false", "test");
    ASSERT_FALSE(wrong.ok()) << dsn;
    EXPECT_NE(wrong.status().message().find("password authentication failed"), std::string::npos)
        << wrong.status().message();
    EXPECT_EQ(wrong.status().message().find("wrong-SECRET"), std::string::npos)
        << wrong.status().message();

    // No password at all (issue 42 item 5): as definite as a wrong one, never "retry
    // when the server is reachable" (kUnavailable, retried for ever); the fix names where
    // a password comes from. passfile=/dev/null: no ~/.pgpass of the machine's.
    if (dsn.find("not%20this%20one") != std::string::npos) continue;  // the DSN has one
    const bool uri = dsn.find("://") != std::string::npos;
    const std::string no_passfile =
        !uri ? " passfile=/dev/null"
             : (dsn.find('?') == std::string::npos ? "?" : "&") + std::string("passfile=/dev/null");
    auto none = ConnectPg(ConnInfo{dsn + no_passfile, ""}, "false", "test");
    ASSERT_FALSE(none.ok()) << dsn;
    EXPECT_EQ(none.status().code(), StatusCode::kPermissionDenied) << none.status().ToString();
    EXPECT_NE(none.status().message().find("no password supplied"), std::string::npos)
        << none.status().message();
    EXPECT_NE(none.status().message().find("--source-password-file"), std::string::npos)
        << none.status().message();
  }
}

// base/sql.h quotes literals for standard_conforming_strings = on (a backslash is an
// ordinary character). A role, database or server that turns it off must not change what a
// quoted literal means on any connection walrelay opens (issue 27, item 9): with it off,
// 'C:\new' would read as an escape string ("C:" newline "ew") and a slot or table name
// with a backslash would name another object.
TEST_F(ReplicationConnectionTest, LiteralsKeepTheirMeaningWhenTheRoleTurnsOffStandardStrings) {
  ASSERT_TRUE(cluster_
                  ->Exec("CREATE ROLE oldstrings LOGIN REPLICATION;"
                         "ALTER ROLE oldstrings SET standard_conforming_strings = off;"
                         "ALTER ROLE oldstrings SET escape_string_warning = off")
                  .ok());
  const std::string text = "C:\\new\\table\\'s";
  for (const char* replication : {"false", "database"}) {
    auto conn = ConnectPg(cluster_->conninfo_for_user("oldstrings"), replication, "test");
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    // The simple query protocol: a walsender takes no other.
    PgResultPtr r(PQexec(conn->get(), ("SELECT " + QuoteLiteral(text)).c_str()));
    ASSERT_EQ(PQresultStatus(r.get()), PGRES_TUPLES_OK)
        << replication << ": " << PQresultErrorMessage(r.get());
    EXPECT_EQ(std::string(PQgetvalue(r.get(), 0, 0)), text) << "replication=" << replication;
  }
  // The user's own options still apply beside ours.
  ConnInfo with_options = cluster_->conninfo_for_user("oldstrings");
  with_options.dsn += " options='-c work_mem=7MB'";
  auto conn = ConnectPg(with_options, "false", "test");
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  auto r = ExecPg(conn->get(), "SELECT current_setting('work_mem'), " + QuoteLiteral(text),
                  {}, "test");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(std::string(PQgetvalue(r->get(), 0, 0)), "7MB");
  EXPECT_EQ(std::string(PQgetvalue(r->get(), 0, 1)), text);
}

TEST_F(ReplicationConnectionTest, UnreachableServerIsUnavailable) {
  auto conn = ReplicationConnection::Connect(
      "host=127.0.0.1 port=1 user=walrelay dbname=postgres "
      "connect_timeout=2");
  ASSERT_FALSE(conn.ok());
  EXPECT_EQ(conn.status().code(), StatusCode::kUnavailable) << conn.status().ToString();
}

// Creates table t and publication p on the cluster, then opens a replication connection
// (null, with the failure reported, if it cannot).
std::unique_ptr<ReplicationConnection> ConnectWithPublication(TestCluster& cluster) {
  Status ddl =
      cluster.Exec("CREATE TABLE t (id int PRIMARY KEY); CREATE PUBLICATION p FOR TABLE t");
  EXPECT_TRUE(ddl.ok()) << ddl.ToString();
  auto conn = ReplicationConnection::Connect(cluster.replication_conninfo());
  EXPECT_TRUE(conn.ok()) << conn.status().ToString();
  return ddl.ok() && conn.ok() ? std::move(*conn) : nullptr;
}

TEST(ReplicationConnectionKeepaliveTest, IdleStreamGetsKeepaliveThatAsksForAReply) {
  auto cluster = TestCluster::Start({.settings = {"wal_sender_timeout=2s"}});
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto conn = ConnectWithPublication(**cluster);
  ASSERT_NE(conn, nullptr);
  auto timeout = conn->WalSenderTimeout();
  ASSERT_TRUE(timeout.ok()) << timeout.status().ToString();
  EXPECT_EQ(*timeout, milliseconds(2000));
  EXPECT_EQ(StatusInterval(*timeout), milliseconds(1000));
  ASSERT_TRUE(conn->CreateLogicalSlot("idle_slot", "pgoutput", /*temporary=*/true).ok());
  ASSERT_TRUE(conn->StartLogical("idle_slot", Lsn(), kPgoutputOptions).ok());

  // Send nothing: the server must ask for a reply before the timeout.
  bool asked = false;
  Lsn server_end;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!asked && std::chrono::steady_clock::now() < deadline) {
    auto f = conn->Read(milliseconds(500));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    if (f->kind == Frame::Kind::kKeepalive) {
      server_end = f->keepalive.wal_end;
      asked = f->keepalive.reply_requested;
    }
  }
  ASSERT_TRUE(asked);
  EXPECT_TRUE(server_end.valid());

  // Answering keepalives (confirming the idle position) keeps the stream alive past the
  // timeout, and an idle slot's confirmed position follows the server.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_TRUE(conn->SendStatus(server_end, server_end, server_end).ok());
    auto f = conn->Read(StatusInterval(*timeout));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_NE(f->kind, Frame::Kind::kEndOfStream);
    if (f->kind == Frame::Kind::kKeepalive) server_end = f->keepalive.wal_end;
  }
  auto confirmed = (*cluster)->QueryScalar(
      "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'idle_slot'");
  ASSERT_TRUE(confirmed.ok()) << confirmed.status().ToString();
  EXPECT_EQ(Lsn::Parse(*confirmed).value_or(Lsn()), server_end);
  EXPECT_TRUE(conn->Close().ok());
}

// SetWakeFd: a Read() waiting on an idle stream ends when the wake descriptor becomes
// readable (the relay's producer has acks to serve), not at the end of its timeout, and
// leaves it drained: the producer's Poll() does not read it, so a descriptor left readable
// would end every later wait at once.
TEST(ReplicationConnectionWakeTest, WaitingReadEndsWhenTheWakeDescriptorIsReadable) {
  auto cluster = TestCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto conn = ConnectWithPublication(**cluster);
  ASSERT_NE(conn, nullptr);
  ASSERT_TRUE(conn->CreateLogicalSlot("wake_slot", "pgoutput", /*temporary=*/true).ok());
  ASSERT_TRUE(conn->StartLogical("wake_slot", Lsn(), kPgoutputOptions).ok());
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
  conn->SetWakeFd(fds[0]);
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(300));
    ASSERT_EQ(::write(fds[1], "x", 1), 1);
  });
  const auto start = std::chrono::steady_clock::now();
  Result<Frame> f = Frame{};
  // Keepalives may come first; the wake ends the first wait with nothing to read.
  while (f.ok() && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    f = conn->Read(std::chrono::seconds(30));
    if (f.ok() && f->kind == Frame::Kind::kTimeout) break;
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  writer.join();
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->kind, Frame::Kind::kTimeout);
  EXPECT_LT(waited, std::chrono::seconds(10)) << "the wait ran to its timeout";
  EXPECT_GE(waited, milliseconds(250));
  pollfd pfd{fds[0], POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 0), 0) << "the wake-up was left readable";
  conn->SetWakeFd(-1);
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_TRUE(conn->Close().ok());
}

TEST(ReplicationConnectionWalLevelTest, WalLevelReplicaIsFailedPrecondition) {
  auto cluster = TestCluster::Start({.settings = {"wal_level=replica"}});
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto conn = ReplicationConnection::Connect((*cluster)->replication_conninfo());
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  auto slot = (*conn)->CreateLogicalSlot("s", "pgoutput", /*temporary=*/true);
  ASSERT_FALSE(slot.ok());
  EXPECT_EQ(slot.status().code(), StatusCode::kFailedPrecondition) << slot.status().ToString();
  EXPECT_NE(slot.status().message().find("wal_level = logical"), std::string::npos)
      << slot.status().message();
}

// A half-open connection: the proxy between client and server stops forwarding without
// closing anything, as when a network path dies without a RST. Read must give up after
// about wal_sender_timeout of silence instead of waiting for TCP (minutes to hours), and
// must not give up on a healthy idle stream whose client reports regularly (the server
// then sends nothing on its own: only the client's reply requests keep it talking).
TEST(ReplicationConnectionLivenessTest, SilenceLongerThanWalSenderTimeoutIsADeadConnection) {
  auto cluster = TestCluster::Start({.settings = {"wal_sender_timeout=2s"}});
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  ASSERT_TRUE((*cluster)
                  ->Exec("CREATE TABLE t (id int PRIMARY KEY); CREATE PUBLICATION p FOR "
                         "TABLE t")
                  .ok());
  auto proxy = testing::TcpProxy::Start((*cluster)->port());
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  auto conn = ReplicationConnection::Connect((*cluster)->tcp_conninfo() +
                                             " port=" + std::to_string((*proxy)->port()) +
                                             " replication=database");
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  ASSERT_EQ((*proxy)->connections(), 1);
  ASSERT_TRUE((*conn)->CreateLogicalSlot("live_slot", "pgoutput", /*temporary=*/true).ok());
  ASSERT_TRUE((*conn)->StartLogical("live_slot", Lsn(), kPgoutputOptions).ok());

  // Like the relay: a status every 500 ms, reads in between. 6 s = 3 x wal_sender_timeout.
  auto run = [&](std::chrono::seconds budget) -> Status {
    const auto until = std::chrono::steady_clock::now() + budget;
    while (std::chrono::steady_clock::now() < until) {
      WALRELAY_RETURN_IF_ERROR((*conn)->SendStatus(Lsn(), Lsn(), Lsn()));
      for (int i = 0; i < 5; ++i) {
        WALRELAY_ASSIGN_OR_RETURN(Frame f, (*conn)->Read(milliseconds(100)));
        if (f.kind == Frame::Kind::kEndOfStream) return UnavailableError("end of stream");
      }
    }
    return Status::Ok();
  };
  Status healthy = run(std::chrono::seconds(6));
  EXPECT_TRUE(healthy.ok()) << "a healthy idle stream was given up: " << healthy.ToString();

  (*proxy)->Freeze();
  const auto frozen_at = std::chrono::steady_clock::now();
  Status dead = run(std::chrono::seconds(20));
  const auto noticed_after = std::chrono::steady_clock::now() - frozen_at;
  EXPECT_EQ(dead.code(), StatusCode::kUnavailable) << dead.ToString();
  EXPECT_NE(dead.message().find("no message from the server for"), std::string::npos)
      << dead.message();
  EXPECT_NE(dead.message().find("connection presumed dead"), std::string::npos);
  // Not a speed assertion: the silence must be noticed at all, long before TCP would.
  EXPECT_LT(noticed_after, std::chrono::seconds(20));
  (*proxy)->Thaw();
}

}  // namespace
}  // namespace walrelay::slot
