// The walrelay program, killed by a fatal signal, says which one, what it costs and where.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace {

TEST(CrashReportTest, AnAbortSaysTheSignalWhatItCostsAndTheStackThenDiesOfIt) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], STDERR_FILENO);
    ::close(out[0]);
    // A relay whose database refuses connections: it keeps retrying, so it stays up.
    ::execl(WALRELAY_BINARY, WALRELAY_BINARY, "run", "--source-dsn",
            "host=127.0.0.1 port=1 dbname=nothing connect_timeout=1",
            "--kafka-bootstrap-servers", "127.0.0.1:1", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  std::string err;
  char buf[4096];
  // The premise: main ran (the retry loop logged), so the handler is in place.
  while (err.find("session failed") == std::string::npos) {
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    err.append(buf, static_cast<size_t>(n));
  }
  ASSERT_NE(err.find("session failed"), std::string::npos) << err;
  ::kill(pid, SIGABRT);
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "it died of the same signal, not an exit: " << status;
  EXPECT_EQ(WTERMSIG(status), SIGABRT);
  EXPECT_NE(err.find("walrelay: died of signal ABRT (Aborted)"), std::string::npos) << err;
  EXPECT_NE(err.find("published again (repeats, nothing lost)"), std::string::npos) << err;
  // The stack: frames in the binary as offsets addr2line reads.
  EXPECT_NE(err.find("walrelay(+0x"), std::string::npos) << err;
}

}  // namespace
