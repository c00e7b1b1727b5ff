// What the audit tests share: `walrelay audit` run as a user runs it, its JSON report read.
#pragma once

#include <simdjson.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace walrelay::testing {

struct CommandResult {
  int code = -1;
  std::string out;  // stdout (stderr is dropped)
};

// The walrelay binary with `args` (a shell command line), as a user runs it.
inline CommandResult Walrelay(const std::string& args) {
  CommandResult r;
  const std::string cmd = std::string(WALRELAY_BINARY) + " " + args + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The sampled event ids of one finding of a --json report.
inline std::vector<std::string> Samples(simdjson::dom::element report, const char* finding) {
  std::vector<std::string> out;
  for (auto s : report[finding]["samples"].get_array()) out.emplace_back(std::string_view(s.get_string()));
  return out;
}

}  // namespace walrelay::testing
