// Waiting on a relay from the database's side, for end-to-end tests: what the slot
// confirmed, and whether a (new) relay process streams. The tests' one way to ask.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "base/lsn.h"
#include "tests/support/pg_cluster.h"
#include "tests/support/subprocess.h"

namespace walrelay::testing {

// The slot's confirmed_flush_lsn; invalid when the slot or the server is not there.
Lsn ConfirmedFlush(const TestCluster& pg, std::string_view slot = "walrelay");

// Waits until the slot's confirmed_flush_lsn reaches the server's WAL insert position as
// of the call (insert, not write: TestCluster commits asynchronously, so the write
// position can be before the last commit). False on timeout.
bool WaitConfirmedPastCurrent(const TestCluster& pg, std::chrono::milliseconds timeout,
                              std::string_view slot = "walrelay");

// Waits until the slot is active for a walsender other than *walsender_pid (a relay
// process that started streaming; a killed predecessor's walsender may linger a moment)
// and stores its pid there. Returns "" when it streams, else why not (the relay exited,
// or 20 s passed) followed by the relay's log.
std::string WaitForNewWalsender(const TestCluster& pg, Subprocess& relay,
                                std::string* walsender_pid, std::string_view slot = "walrelay");

}  // namespace walrelay::testing
