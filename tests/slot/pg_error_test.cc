#include "slot/pg_error.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace walrelay::slot {
namespace {

TEST(PgErrorTest, MapsSqlStatesToWhatTheCallerShouldDo) {
  Status busy = MapPgError("55006", "replication slot \"s\" is active for PID 42", "r", "START");
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(busy.message(),
            "START: replication slot \"s\" is active for PID 42: another walrelay (or client) is "
            "reading it; stop it or use another slot");
  Status priv = MapPgError("42501", "must be superuser or replication role to start walsender",
                           "app", "connect");
  EXPECT_EQ(priv.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(priv.message().find("ALTER ROLE app REPLICATION"), std::string::npos);
  EXPECT_EQ(MapPgError("42704", "replication slot \"x\" does not exist", "", "").code(),
            StatusCode::kNotFound);
  Status wal = MapPgError("55000", "logical decoding requires wal_level >= logical", "", "");
  EXPECT_EQ(wal.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(wal.message().find("restart"), std::string::npos);
  EXPECT_EQ(MapPgError("08006", "connection lost", "", "").code(), StatusCode::kUnavailable);
  EXPECT_EQ(MapPgError("", "server closed the connection", "", "").code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(MapPgError("57P01", "terminating connection", "", "").code(), StatusCode::kUnavailable);
  EXPECT_EQ(MapPgError("42710", "exists", "", "").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(MapPgError("53400", "all replication slots are in use", "", "").code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(MapPgError("42601", "syntax error", "", "").code(), StatusCode::kInvalidArgument);
}

TEST(PgErrorTest, SessionOptionsKeepTheUsersOptionsAndAddOursLast) {
  ::unsetenv("PGOPTIONS");
  auto plain = SessionOptions("host=/tmp dbname=app", kRelaySession);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(*plain, "-c synchronous_commit=local -c statement_timeout=30000");
  auto user = SessionOptions("host=/tmp options='-c search_path=app -c synchronous_commit=on'",
                             kRelaySession);
  ASSERT_TRUE(user.ok());
  EXPECT_EQ(*user,
            "-c search_path=app -c synchronous_commit=on -c synchronous_commit=local -c "
            "statement_timeout=30000");
  auto uri =
      SessionOptions("postgresql://h/db?options=-c%20work_mem%3D8MB", {.local_commit = true});
  ASSERT_TRUE(uri.ok());
  EXPECT_EQ(*uri, "-c work_mem=8MB -c synchronous_commit=local");
  ::setenv("PGOPTIONS", "-c lock_timeout=1s", 1);
  auto env = SessionOptions("dbname=app", {.statement_timeout = std::chrono::seconds(5)});
  ::unsetenv("PGOPTIONS");
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(*env, "-c lock_timeout=1s -c statement_timeout=5000");
  EXPECT_EQ(SessionOptions("host='unterminated", kRelaySession).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace walrelay::slot
