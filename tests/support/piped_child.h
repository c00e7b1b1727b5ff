// PipedChild: a child process whose stdin and stdout are pipes to the test, for programs
// driven by line commands (walrelay-devbroker: "down all", "up all", "topic t 3").
// The destructor SIGKILLs and reaps a child that still runs. Not thread-safe.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

extern char** environ;

namespace walrelay::testing {

class PipedChild {
 public:
  // Starts args[0] with args. The child gets SIGKILL when the thread that started it
  // ends (PR_SET_PDEATHSIG), so a test that dies leaves no child behind.
  bool Start(std::vector<std::string> args) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return false;
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {  // only async-signal-safe calls until exec
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      dup2(in[0], 0);
      dup2(out[1], 1);
      execve(argv[0], argv.data(), environ);
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
    return pid_ > 0;
  }

  ~PipedChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdin_ >= 0) close(stdin_);
    if (stdout_ >= 0) close(stdout_);
  }

  // One line from the child's stdout (without '\n'), or "" on timeout/EOF.
  std::string ReadLine(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{stdout_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char tmp[1024];
      ssize_t n = read(stdout_, tmp, sizeof(tmp));
      if (n <= 0) return "";
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }

  std::string Command(const std::string& cmd) {
    std::string line = cmd + "\n";
    if (write(stdin_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return "";
    return ReadLine();
  }

  // Sends `sig` and returns the exit status (or -1).
  int Stop(int sig) {
    kill(pid_, sig);
    int status = 0;
    if (waitpid(pid_, &status, 0) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  std::string buf_;
};

}  // namespace walrelay::testing
