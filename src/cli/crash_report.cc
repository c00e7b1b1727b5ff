#include "src/cli/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <cstddef>
#include <initializer_list>

namespace walrelay::cli {
namespace {

void Write(const char* s) {
  size_t n = strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void OnFatalSignal(int sig) {
  // SA_RESETHAND restored the default action: a second fault here ends the process.
  Write("\nwalrelay: died of signal ");
  Write(sigabbrev_np(sig) != nullptr ? sigabbrev_np(sig) : "?");
  Write(" (");
  Write(sigdescr_np(sig) != nullptr ? sigdescr_np(sig) : "unknown signal");
  Write("). What it cost: a relay confirms WAL only for events Kafka acknowledged, so after a "
        "restart the unconfirmed ones are published again (repeats, nothing lost); any other "
        "command left its work unfinished and can be run again. Report this with the lines "
        "above it (an assertion or a heap check names the cause) and this stack "
        "(addr2line -e <binary> <offset> turns an offset into a line):\n");
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  ::raise(sig);
}

}  // namespace

void InstallCrashReport() {
  // backtrace() loads libgcc on its first call, which may allocate: do it now, not in the
  // handler.
  void* warm[1];
  (void)backtrace(warm, 1);
  static char alt_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  (void)sigaltstack(&ss, nullptr);  // a stack overflow still gets its report
  struct sigaction sa{};
  sa.sa_handler = OnFatalSignal;
  sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) (void)sigaction(sig, &sa, nullptr);
}

}  // namespace walrelay::cli
