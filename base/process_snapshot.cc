#include "base/process_snapshot.h"

#include <dirent.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace walrelay {
namespace {

// The fields of /proc/self/stat after the command name (which may hold spaces and
// parentheses: split after the last ')'). fields[0] is the state (field 3 of proc(5)).
std::vector<std::string> StatFields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return {};
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;
}

// proc(5) field N (1-based, as the manual numbers them) as a number, or -1.
double StatField(const std::vector<std::string>& fields, size_t n) {
  if (n < 3 || n - 3 >= fields.size()) return -1;
  char* end = nullptr;
  const double v = std::strtod(fields[n - 3].c_str(), &end);
  return end != nullptr && *end == '\0' ? v : -1;
}

double BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  for (std::string key; in >> key;) {
    if (key == "btime") {
      double v = -1;
      in >> v;
      return v;
    }
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

double OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  double n = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the descriptor of the listing itself
}

}  // namespace

ProcessSnapshot ReadProcessSnapshot() {
  ProcessSnapshot s;
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    s.cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                    static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  }
  const std::vector<std::string> stat = StatFields();
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  if (const double rss_pages = StatField(stat, 24); rss_pages >= 0) {
    s.resident_bytes = rss_pages * page;
  }
  s.virtual_bytes = StatField(stat, 23);
  s.threads = StatField(stat, 20);
  // Fixed for the process's life: computed once.
  static const double start = [&stat, ticks] {
    const double boot = BootTimeSeconds();
    const double since_boot = StatField(stat, 22);
    return boot < 0 || since_boot < 0 || ticks <= 0 ? -1.0 : boot + since_boot / ticks;
  }();
  s.start_time_seconds = start;
  s.open_fds = OpenFds();
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    s.max_fds = lim.rlim_cur == RLIM_INFINITY ? -1 : static_cast<double>(lim.rlim_cur);
  }
  const struct mallinfo2 mi = mallinfo2();
  s.heap_in_use_bytes = static_cast<double>(mi.uordblks + mi.hblkhd);
  s.heap_retained_bytes = static_cast<double>(mi.fordblks);
  return s;
}

}  // namespace walrelay
