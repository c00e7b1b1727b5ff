// Subprocess: runs a program (the walrelay binary, the dev broker, a consumer) as a child
// for end-to-end and fault tests: kill -9 at a chosen moment, SIGTERM, exit status, peak
// RSS. stdout and stderr go to a log file so a failing test can show them.
// Thread safety: one owner thread. The child is SIGKILLed on destruction if still running.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace walrelay::testing {

class Subprocess {
 public:
  // Starts argv[0] with argv, extra environment entries ("NAME=value") and output to
  // `log_path` (appended).
  static Result<Subprocess> Start(const std::vector<std::string>& argv, const std::string& log_path,
                                  const std::vector<std::string>& env = {});
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  ~Subprocess();

  pid_t pid() const { return pid_ > 0 ? pid_ : -pid_; }
  bool running();
  void Signal(int sig);
  // Waits for exit; the exit code, 128+signal when killed, nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // Peak resident set size (VmHWM) in bytes while running, 0 when unknown.
  uint64_t PeakRssBytes() const;
  // Total user+system CPU seconds of the (running) process, from /proc/pid/stat.
  double CpuSeconds() const;
  // The last `max_lines` lines of the log.
  std::string LogTail(int max_lines = 40) const;

 private:
  Subprocess(pid_t pid, std::string log) : pid_(pid), log_path_(std::move(log)) {}
  pid_t pid_ = 0;  // > 0 running, < 0 reaped (-pid), 0 none
  int exit_code_cache_ = -1;
  std::string log_path_;
};

// The whole content of the file at `path` ("" when it cannot be read): logs, outputs.
std::string ReadFile(const std::string& path);

}  // namespace walrelay::testing
