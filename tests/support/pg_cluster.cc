#include "tests/support/pg_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace walrelay::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string ErrnoText(std::string_view what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// Quotes a conninfo value: '...' with \ and ' escaped.
std::string QuoteConninfo(std::string_view v) {
  std::string out = "'";
  for (char c : v) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  out += '\'';
  return out;
}

std::string TailOfFile(const std::string& path, int max_lines) {
  std::ifstream in(path);
  if (!in) return "(no log at " + path + ")";
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (static_cast<int>(lines.size()) > max_lines) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) {
    out += l;
    out += '\n';
  }
  return out;
}

// Asks the kernel for a free TCP port on 127.0.0.1. Another process may grab it before
// the server binds; StartServer retries on "address in use".
Result<int> FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return InternalError(ErrnoText("socket"));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return InternalError(ErrnoText("bind 127.0.0.1:0"));
  }
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return InternalError(ErrnoText("getsockname"));
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

struct SpawnSpec {
  std::vector<std::string> argv;
  std::string log_path;  // stdout and stderr, appended
  std::string cwd;
  bool drop_privileges = false;
  uid_t uid = 0;
  gid_t gid = 0;
};

// fork + (setgid/setuid) + PR_SET_PDEATHSIG + exec. Between fork and exec the child only
// makes async-signal-safe calls; everything is prepared before the fork.
Result<pid_t> Spawn(const SpawnSpec& spec) {
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int log_fd = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return InternalError(ErrnoText("open " + spec.log_path));
  if (spec.drop_privileges && ::fchown(log_fd, spec.uid, spec.gid) != 0) {
    ::close(log_fd);
    return InternalError(ErrnoText("fchown " + spec.log_path));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    return InternalError(ErrnoText("fork"));
  }
  if (pid == 0) {
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    if (spec.drop_privileges) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(spec.gid) != 0 || ::setuid(spec.uid) != 0) {
        static const char kMsg[] = "walrelay TestCluster: cannot drop privileges\n";
        (void)!::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
        ::_exit(126);
      }
    }
    // After the credential change, which clears the death signal.
    ::prctl(PR_SET_PDEATHSIG, SIGQUIT);
    if (::getppid() != parent) ::_exit(125);  // the parent died before prctl
    if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) ::_exit(124);
    ::execv(argv[0], argv.data());
    static const char kMsg[] = "walrelay TestCluster: exec failed\n";
    (void)!::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    ::_exit(127);
  }
  ::close(log_fd);
  return pid;
}

// Waits for `pid` to exit. Returns the wait status, or nullopt after `timeout`.
std::optional<int> WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;  // not our child any more
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

std::string ResolveBinDir(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* env = std::getenv("WALRELAY_PG_BINDIR"); env && *env) return env;
  return "/usr/lib/postgresql/15/bin";
}

std::string ResolveTempRoot(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* env = std::getenv("TMPDIR"); env && *env) return env;
  return "/tmp";
}

struct PgConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct PgResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ConnPtr = std::unique_ptr<PGconn, PgConnDeleter>;
using ResultPtr = std::unique_ptr<PGresult, PgResultDeleter>;

Result<ResultPtr> RunSql(const std::string& conninfo, std::string_view sql) {
  ConnPtr conn(PQconnectdb(conninfo.c_str()));
  if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
    return UnavailableError("TestCluster: cannot connect (" + conninfo +
                            "): " + (conn ? PQerrorMessage(conn.get()) : "out of memory"));
  }
  ResultPtr res(PQexec(conn.get(), std::string(sql).c_str()));
  ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    const char* state = res ? PQresultErrorField(res.get(), PG_DIAG_SQLSTATE) : nullptr;
    return InvalidArgumentError("TestCluster: SQL failed [" + std::string(state ? state : "?") +
                                "] " + PQerrorMessage(conn.get()) + "  in: " + std::string(sql));
  }
  return res;
}

}  // namespace

Result<std::unique_ptr<TestCluster>> TestCluster::Start(Options options) {
  std::unique_ptr<TestCluster> c(new TestCluster());
  c->options_ = std::move(options);
  c->bin_dir_ = ResolveBinDir(c->options_.bin_dir);
  const std::string initdb = c->bin_dir_ + "/initdb";
  if (::access(initdb.c_str(), X_OK) != 0 || ::access((c->bin_dir_ + "/postgres").c_str(), X_OK)) {
    return FailedPreconditionError("PostgreSQL server binaries not found in " + c->bin_dir_ +
                                   "; install postgresql-15 or set WALRELAY_PG_BINDIR");
  }

  if (::geteuid() == 0) {
    // PostgreSQL refuses to run as root: hand everything to an unprivileged user.
    std::vector<std::string> candidates;
    if (!c->options_.os_user.empty()) {
      candidates.push_back(c->options_.os_user);
    } else {
      candidates = {"postgres", "nobody"};
    }
    for (const auto& name : candidates) {
      if (const passwd* pw = ::getpwnam(name.c_str())) {
        c->uid_ = pw->pw_uid;
        c->gid_ = pw->pw_gid;
        c->drop_privileges_ = true;
        break;
      }
    }
    if (!c->drop_privileges_) {
      return FailedPreconditionError(
          "running as root and no unprivileged user (postgres, nobody) exists to run the "
          "PostgreSQL server");
    }
  }

  std::string templ = ResolveTempRoot(c->options_.temp_root) + "/walrelay-pg-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) return InternalError(ErrnoText("mkdtemp " + templ));
  c->dir_ = templ;  // from here on the destructor removes it
  c->data_dir_ = c->dir_ + "/data";
  c->server_log_ = c->dir_ + "/server.log";
  if (::chmod(c->dir_.c_str(), 0700) != 0) return InternalError(ErrnoText("chmod " + c->dir_));
  if (c->drop_privileges_ && ::chown(c->dir_.c_str(), c->uid_, c->gid_) != 0) {
    return InternalError(ErrnoText("chown " + c->dir_));
  }

  WALRELAY_RETURN_IF_ERROR(c->InitDataDir(initdb));

  {
    std::ofstream conf(c->data_dir_ + "/postgresql.conf", std::ios::app);
    conf << "\n# walrelay TestCluster\n"
         << "listen_addresses = '127.0.0.1'\n"
         << "unix_socket_directories = '" << c->dir_ << "'\n"
         << "wal_level = logical\n"
         << "max_replication_slots = 20\n"
         << "max_wal_senders = 20\n"
         << "fsync = off\n"
         << "synchronous_commit = off\n"
         << "full_page_writes = off\n"
         << "shared_buffers = 32MB\n"
         << "log_line_prefix = '%m [%p] '\n";
    for (const auto& s : c->options_.settings) {
      auto eq = s.find('=');
      if (eq == std::string::npos || eq == 0) {
        return InvalidArgumentError("TestCluster setting '" + s + "' is not name=value");
      }
      std::string value = s.substr(eq + 1);
      std::string quoted = "'";
      for (char ch : value) {
        if (ch == '\'') quoted += '\'';
        quoted += ch;
      }
      quoted += '\'';
      conf << s.substr(0, eq) << " = " << quoted << "\n";
    }
    if (!conf) return InternalError("cannot append to " + c->data_dir_ + "/postgresql.conf");
  }

  WALRELAY_RETURN_IF_ERROR(c->StartServer());
  return c;
}

namespace {

// Runs `spec` to its end (2 minutes at most); `what` names it in errors.
Status RunToEnd(const SpawnSpec& spec, const std::string& what) {
  WALRELAY_ASSIGN_OR_RETURN(pid_t pid, Spawn(spec));
  std::optional<int> status = WaitExit(pid, std::chrono::minutes(2));
  if (!status) {
    ::kill(pid, SIGKILL);
    WaitExit(pid, std::chrono::seconds(5));
    return DeadlineExceededError(what + " did not finish in 2 minutes; log:\n" +
                                 TailOfFile(spec.log_path, 40));
  }
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    return InternalError(what + " failed (" + DescribeWaitStatus(*status) + "); log:\n" +
                         TailOfFile(spec.log_path, 40));
  }
  return Status::Ok();
}

}  // namespace

Status TestCluster::InitDataDir(const std::string& initdb) {
  // initdb costs about a second of CPU; a suite starts hundreds of clusters. The first
  // cluster of a machine runs it into a template (one per initdb binary and server user,
  // made under an exclusive lock, published by a rename) and every cluster copies it.
  struct stat bin {};
  if (::stat(initdb.c_str(), &bin) != 0) return InternalError(ErrnoText("stat " + initdb));
  const std::string root = ResolveTempRoot(options_.temp_root);
  const std::string templ = root + "/walrelay-pg-template-" + std::to_string(uid_) + "-" +
                            std::to_string(std::hash<std::string>{}(initdb)) + "-" +
                            std::to_string(static_cast<long long>(bin.st_mtime));
  SpawnSpec spec;
  spec.log_path = dir_ + "/initdb.log";
  spec.cwd = dir_;
  spec.drop_privileges = drop_privileges_;
  spec.uid = uid_;
  spec.gid = gid_;
  if (::access((templ + "/data/PG_VERSION").c_str(), R_OK) != 0) {
    const std::string lock_path = templ + ".lock";
    const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock < 0) return InternalError(ErrnoText("open " + lock_path));
    ::flock(lock, LOCK_EX);
    Status made = Status::Ok();
    if (::access((templ + "/data/PG_VERSION").c_str(), R_OK) != 0) {
      // A half-made template (a killed run) is made again.
      std::error_code ec;
      std::filesystem::remove_all(templ + ".tmp", ec);
      if (::mkdir((templ + ".tmp").c_str(), 0700) != 0 ||
          (drop_privileges_ && ::chown((templ + ".tmp").c_str(), uid_, gid_) != 0)) {
        made = InternalError(ErrnoText("mkdir " + templ + ".tmp"));
      } else {
        spec.argv = {initdb, "-D", templ + ".tmp/data", "-U", "walrelay", "--auth=trust", "-E",
                     "UTF8", "--locale=C", "--no-sync", "--no-instructions"};
        made = RunToEnd(spec, "initdb");
        if (made.ok() && ::rename((templ + ".tmp").c_str(), templ.c_str()) != 0) {
          made = InternalError(ErrnoText("rename " + templ + ".tmp"));
        }
      }
    }
    ::flock(lock, LOCK_UN);
    ::close(lock);
    WALRELAY_RETURN_IF_ERROR(made);
  }
  spec.argv = {"/bin/cp", "-a", templ + "/data", data_dir_};
  return RunToEnd(spec, "copying the initdb template " + templ);
}

Status TestCluster::StartServer() {
  if (pid_ > 0) return Status::Ok();
  const bool fixed_port = port_ != 0;  // a restart keeps the port clients know
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (!fixed_port) {
      WALRELAY_ASSIGN_OR_RETURN(port_, FreePort());
    }
    std::error_code ec;
    const auto log_size_before = fs::exists(server_log_) ? fs::file_size(server_log_, ec) : 0;
    SpawnSpec spec;
    spec.argv = {bin_dir_ + "/postgres", "-D", data_dir_, "-p", std::to_string(port_)};
    spec.log_path = server_log_;
    spec.cwd = dir_;
    spec.drop_privileges = drop_privileges_;
    spec.uid = uid_;
    spec.gid = gid_;
    WALRELAY_ASSIGN_OR_RETURN(pid_t pid, Spawn(spec));
    pid_ = pid;

    const std::string ci = conninfo();
    const auto deadline = Clock::now() + options_.start_timeout;
    for (;;) {
      if (PQping(ci.c_str()) == PQPING_OK) return Status::Ok();
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        std::string log;
        {
          std::ifstream in(server_log_);
          in.seekg(static_cast<std::streamoff>(log_size_before));
          std::stringstream ss;
          ss << in.rdbuf();
          log = ss.str();
        }
        if (!fixed_port && log.find("could not bind") != std::string::npos) break;  // retry
        return InternalError("postgres exited during startup (" + DescribeWaitStatus(status) +
                             "); server log " + server_log_ + ":\n" + ServerLogTail());
      }
      if (Clock::now() >= deadline) {
        Stop(StopMode::kImmediate).IgnoreError();
        return DeadlineExceededError("postgres did not accept connections within " +
                                     std::to_string(options_.start_timeout.count()) +
                                     " ms; server log " + server_log_ + ":\n" + ServerLogTail());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return UnavailableError("postgres could not bind a free port after 5 attempts; server log:\n" +
                          ServerLogTail());
}

TestCluster::~TestCluster() {
  Stop(StopMode::kImmediate).IgnoreError();
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

Status TestCluster::Stop(StopMode mode) {
  if (pid_ <= 0) return Status::Ok();
  ::kill(pid_, mode == StopMode::kFast ? SIGINT : SIGQUIT);
  std::optional<int> st = WaitExit(pid_, std::chrono::seconds(30));
  if (!st) {
    ::kill(pid_, SIGKILL);
    WaitExit(pid_, std::chrono::seconds(10));
    pid_ = -1;
    return DeadlineExceededError("postgres did not stop within 30 s; killed it");
  }
  pid_ = -1;
  return Status::Ok();
}

Status TestCluster::Restart(StopMode mode) {
  WALRELAY_RETURN_IF_ERROR(Stop(mode));
  return StartServer();
}

std::string TestCluster::conninfo() const { return conninfo_for_user("walrelay"); }

std::string TestCluster::replication_conninfo() const {
  return conninfo() + " replication=database";
}

std::string TestCluster::conninfo_for_user(std::string_view user) const {
  return "host=" + QuoteConninfo(dir_) + " port=" + std::to_string(port_) +
         " user=" + QuoteConninfo(user) + " dbname=postgres";
}

std::string TestCluster::tcp_conninfo() const {
  return "host=127.0.0.1 port=" + std::to_string(port_) + " user=walrelay dbname=postgres";
}

Status TestCluster::Exec(std::string_view sql) const {
  auto res = RunSql(conninfo(), sql);
  return res.status();
}

Result<std::string> TestCluster::QueryScalar(std::string_view sql) const {
  WALRELAY_ASSIGN_OR_RETURN(ResultPtr res, RunSql(conninfo(), sql));
  if (PQntuples(res.get()) < 1 || PQnfields(res.get()) < 1) {
    return NotFoundError("TestCluster: no row from: " + std::string(sql));
  }
  if (PQgetisnull(res.get(), 0, 0)) {
    return InvalidArgumentError("TestCluster: NULL from: " + std::string(sql));
  }
  return std::string(PQgetvalue(res.get(), 0, 0));
}

Result<std::vector<std::vector<std::optional<std::string>>>> TestCluster::Query(
    std::string_view sql) const {
  WALRELAY_ASSIGN_OR_RETURN(ResultPtr res, RunSql(conninfo(), sql));
  std::vector<std::vector<std::optional<std::string>>> rows;
  const int n = PQntuples(res.get());
  const int m = PQnfields(res.get());
  rows.reserve(n);
  for (int i = 0; i < n; ++i) {
    auto& row = rows.emplace_back();
    row.reserve(m);
    for (int j = 0; j < m; ++j) {
      if (PQgetisnull(res.get(), i, j)) {
        row.emplace_back(std::nullopt);
      } else {
        row.emplace_back(std::string(PQgetvalue(res.get(), i, j), PQgetlength(res.get(), i, j)));
      }
    }
  }
  return rows;
}

std::string TestCluster::ServerLogTail(int max_lines) const {
  return TailOfFile(server_log_, max_lines);
}

}  // namespace walrelay::testing
