// TestCluster: a throwaway PostgreSQL server for integration tests.
//
// Start() runs initdb into a fresh temporary directory and starts `postgres` as a direct
// child of the calling thread, listening on a free TCP port on 127.0.0.1 and on a unix
// socket inside the temporary directory, with wal_level=logical and fsync off. When the
// test process runs as root (as in CI) the directory is handed to an unprivileged user
// (the `postgres` system user, else `nobody`) and initdb/postgres run as that user.
//
// Lifetime: the destructor stops the server (immediate shutdown) and removes the
// directory. If the test process dies, even by SIGKILL, the kernel sends SIGQUIT to the
// server (PR_SET_PDEATHSIG), so no server outlives its test; only the directory is left.
// Note PR_SET_PDEATHSIG follows the *thread* that forked: call Start()/Restart() from a
// thread that outlives the cluster (normally the test's main thread).
//
// Layout of the temporary directory: data/ (PGDATA), initdb.log, server.log, and the
// socket file .s.PGSQL.<port>. On a startup failure the error carries the log's tail.
//
// Thread safety: not thread-safe; one thread drives a TestCluster. The SQL helpers open
// a fresh connection per call and may be used while other connections are open.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace walrelay::testing {

class TestCluster {
 public:
  struct Options {
    // Extra server settings, "name=value" each (e.g. "max_slot_wal_keep_size=64MB"),
    // appended to postgresql.conf after the defaults, so they override them.
    std::vector<std::string> settings;
    // Directory holding initdb and postgres. Empty: $WALRELAY_PG_BINDIR, else
    // /usr/lib/postgresql/15/bin.
    std::string bin_dir;
    // Parent of the temporary directory. Empty: $TMPDIR, else /tmp.
    std::string temp_root;
    // OS user for the server when running as root. Empty: "postgres", else "nobody".
    std::string os_user;
    // How long to wait for the server to accept connections.
    std::chrono::milliseconds start_timeout{30000};
  };

  enum class StopMode {
    kFast,       // SIGINT: clean shutdown with a checkpoint (pg_ctl -m fast).
    kImmediate,  // SIGQUIT: no checkpoint; the next start runs crash recovery.
  };

  static Result<std::unique_ptr<TestCluster>> Start(Options options);
  static Result<std::unique_ptr<TestCluster>> Start() { return Start(Options{}); }

  ~TestCluster();
  TestCluster(const TestCluster&) = delete;
  TestCluster& operator=(const TestCluster&) = delete;

  // Keyword/value conninfo: host=<socket dir> port=<port> user=walrelay dbname=postgres.
  std::string conninfo() const;
  // conninfo() plus replication=database.
  std::string replication_conninfo() const;
  // conninfo() with another user (e.g. a role created by the test).
  std::string conninfo_for_user(std::string_view user) const;
  // The same server over TCP (host=127.0.0.1).
  std::string tcp_conninfo() const;

  int port() const { return port_; }
  const std::string& socket_dir() const { return dir_; }
  const std::string& data_dir() const { return data_dir_; }
  const std::string& server_log_path() const { return server_log_; }
  bool running() const { return pid_ > 0; }
  // PID of the postmaster, or -1 when stopped.
  int pid() const { return pid_; }

  // Stops the server and waits for it to exit. OK if already stopped.
  Status Stop(StopMode mode = StopMode::kFast);
  // Stops (if running) and starts again on the same port and data directory.
  Status Restart(StopMode mode = StopMode::kFast);

  // SQL on a fresh connection to conninfo(). Exec accepts several statements.
  Status Exec(std::string_view sql) const;
  // First column of the first row; kNotFound if no row, kInvalidArgument if NULL.
  Result<std::string> QueryScalar(std::string_view sql) const;
  // All rows; nullopt for SQL NULL.
  Result<std::vector<std::vector<std::optional<std::string>>>> Query(std::string_view sql) const;

  // The last `max_lines` lines of the server log (for failure messages).
  std::string ServerLogTail(int max_lines = 40) const;

 private:
  TestCluster() = default;
  // data_dir_ from initdb: a copy of this machine's template, made on first use.
  Status InitDataDir(const std::string& initdb);
  Status StartServer();

  Options options_;
  std::string bin_dir_;
  std::string dir_;
  std::string data_dir_;
  std::string server_log_;
  int port_ = 0;
  int pid_ = -1;
  unsigned uid_ = 0;
  unsigned gid_ = 0;
  bool drop_privileges_ = false;
};

}  // namespace walrelay::testing
