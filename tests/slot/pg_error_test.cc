#include "slot/pg_error.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace walrelay::slot
