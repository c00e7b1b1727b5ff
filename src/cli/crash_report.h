// What the walrelay program prints when it dies of a fatal signal.
#pragma once

namespace walrelay::cli {

// Installs handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT (a librdkafka assertion,
// glibc's heap checks and an uncaught exception all end in abort()) that write to stderr
// which signal killed the process, what that costs and the stack of the thread that got it,
// then die of the same signal with its default action (the exit status and any core dump
// stay what they would have been). Call once, early in main; async-signal-safe writes only.
void InstallCrashReport();

}  // namespace walrelay::cli
