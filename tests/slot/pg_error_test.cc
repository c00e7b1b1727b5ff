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
  EXPECT_EQ(*plain, "-c standard_conforming_strings=on -c synchronous_commit=local -c statement_timeout=30000");
  auto user = SessionOptions("host=/tmp options='-c search_path=app -c synchronous_commit=on'",
                             kRelaySession);
  ASSERT_TRUE(user.ok());
  EXPECT_EQ(*user,
            "-c search_path=app -c synchronous_commit=on -c standard_conforming_strings=on -c "
            "synchronous_commit=local -c statement_timeout=30000");
  auto uri =
      SessionOptions("postgresql://h/db?options=-c%20work_mem%3D8MB", {.local_commit = true});
  ASSERT_TRUE(uri.ok());
  EXPECT_EQ(*uri, "-c work_mem=8MB -c standard_conforming_strings=on -c synchronous_commit=local");
  ::setenv("PGOPTIONS", "-c lock_timeout=1s", 1);
  auto env = SessionOptions("dbname=app", {.statement_timeout = std::chrono::seconds(5)});
  ::unsetenv("PGOPTIONS");
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(*env, "-c lock_timeout=1s -c standard_conforming_strings=on -c statement_timeout=5000");
  EXPECT_EQ(SessionOptions("host='unterminated", kRelaySession).status().code(),
            StatusCode::kInvalidArgument);
}

// The one table: what the relay sees (the code) and what the inbox acts on (the fault).
TEST(PgErrorTest, SqlStateTableClassesCodeAndFault) {
  struct Case {
    const char* sqlstate;
    StatusCode code;
    PgFault fault;
  };
  const Case cases[] = {
      {"40001", StatusCode::kUnavailable, PgFault::kTransient},
      {"40P01", StatusCode::kUnavailable, PgFault::kTransient},
      {"08006", StatusCode::kUnavailable, PgFault::kTransient},
      {"57014", StatusCode::kUnavailable, PgFault::kTransient},
      {"53100", StatusCode::kUnavailable, PgFault::kTransient},
      {"XX000", StatusCode::kUnavailable, PgFault::kTransient},
      {"", StatusCode::kUnavailable, PgFault::kTransient},
      {"55P03", StatusCode::kFailedPrecondition, PgFault::kTransient},
      {"55006", StatusCode::kFailedPrecondition, PgFault::kTransient},
      {"53400", StatusCode::kResourceExhausted, PgFault::kServerState},
      {"22021", StatusCode::kInvalidArgument, PgFault::kData},
      {"22P05", StatusCode::kInvalidArgument, PgFault::kData},
      {"23505", StatusCode::kFailedPrecondition, PgFault::kData},
      {"54000", StatusCode::kResourceExhausted, PgFault::kData},
      {"42P01", StatusCode::kInvalidArgument, PgFault::kStatement},
      {"42601", StatusCode::kInvalidArgument, PgFault::kStatement},
      {"42501", StatusCode::kPermissionDenied, PgFault::kStatement},
      {"42704", StatusCode::kNotFound, PgFault::kStatement},
      {"0A000", StatusCode::kFailedPrecondition, PgFault::kStatement},
      {"P0001", StatusCode::kFailedPrecondition, PgFault::kServerState},
      {"25P02", StatusCode::kFailedPrecondition, PgFault::kServerState},
  };
  for (const Case& c : cases) {
    const SqlStateRule& rule = ClassifySqlState(c.sqlstate);
    EXPECT_EQ(rule.code, c.code) << c.sqlstate;
    EXPECT_EQ(rule.fault, c.fault) << c.sqlstate;
    // MapPgError and the table never disagree on the code.
    EXPECT_EQ(MapPgError(c.sqlstate, "m", "r", "ctx").code(), c.code) << c.sqlstate;
  }
  for (const SqlStateRule& rule : SqlStateTable()) {
    EXPECT_EQ(MapPgError(rule.sqlstate.size() == 2 ? std::string(rule.sqlstate) + "000"
                                                   : std::string(rule.sqlstate),
                         "m", "r", "ctx")
                  .code(),
              rule.code)
        << rule.sqlstate;
  }
}

// Issue 13: a network connection without verified TLS is called out at start; local ones
// and verify-full are not.
TEST(PgErrorTest, TransportSecurityWarningForUnverifiedNetworkConnections) {
  struct Case {
    const char* host;
    bool ssl;
    const char* sslmode;
    const char* expect;  // "" = no warning, else a word the warning holds
  };
  const Case cases[] = {
      {"/var/run/postgresql", false, "prefer", ""},
      {"", false, "prefer", ""},
      {"localhost", false, "disable", ""},
      {"127.0.0.1", false, "prefer", ""},
      {"::1", false, "prefer", ""},
      {"db.example", true, "verify-full", ""},
      {"db.example", false, "prefer", "not encrypted"},
      {"10.0.0.5", false, "disable", "not encrypted"},
      {"db.example", true, "require", "not verified"},
      {"db.example", true, "verify-ca", "host name"},
      {"db.example", true, "prefer", "not verified"},
  };
  for (const Case& c : cases) {
    const std::string w = TransportSecurityWarning(c.host, "5432", c.ssl, c.sslmode);
    if (std::string_view(c.expect).empty()) {
      EXPECT_EQ(w, "") << c.host << " " << c.sslmode;
    } else {
      EXPECT_NE(w.find(c.expect), std::string::npos) << c.host << " " << c.sslmode << ": " << w;
      EXPECT_NE(w.find("sslmode=verify-full"), std::string::npos) << w;
    }
  }
}

}  // namespace
}  // namespace walrelay::slot
