// What the audit tests share: `walrelay audit` run as a user runs it, its JSON report read.
#pragma once

#include <simdjson.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace walrelay::testing {

struct CommandResult {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// The walrelay binary with `args` (a shell command line), as a user runs it.
inline CommandResult Walrelay(const std::string& args) {
  CommandResult r;
  char err_path[] = "/tmp/walrelay-command-stderr-XXXXXX";
  const int err_fd = ::mkstemp(err_path);
  if (err_fd < 0) return r;
  ::close(err_fd);
  const std::string cmd = std::string(WALRELAY_BINARY) + " " + args + " 2>" + err_path;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p != nullptr) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int status = ::pclose(p);
    // The shell says a signal as 128 + its number.
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  if (FILE* e = std::fopen(err_path, "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, e)) > 0) r.err.append(buf, n);
    std::fclose(e);
  }
  ::unlink(err_path);
  return r;
}

// The sampled event ids of one finding of a --json report.
inline std::vector<std::string> Samples(simdjson::dom::element report, const char* finding) {
  std::vector<std::string> out;
  for (auto s : report[finding]["samples"].get_array()) out.emplace_back(std::string_view(s.get_string()));
  return out;
}

}  // namespace walrelay::testing
