#include "tests/support/slot_wait.h"

#include <thread>

#include "base/sql.h"

namespace walrelay::testing {

Lsn ConfirmedFlush(const TestCluster& pg, std::string_view slot) {
  auto v =
      pg.QueryScalar("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = " +
                     QuoteLiteral(slot));
  return v.ok() ? Lsn::Parse(*v).value_or(Lsn()) : Lsn();
}

bool WaitConfirmedPastCurrent(const TestCluster& pg, std::chrono::milliseconds timeout,
                              std::string_view slot) {
  auto current = pg.QueryScalar("SELECT pg_current_wal_insert_lsn()");
  if (!current.ok()) return false;
  const Lsn target = Lsn::Parse(*current).value_or(Lsn());
  for (auto until = std::chrono::steady_clock::now() + timeout;
       std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(std::chrono::milliseconds(50))) {
    if (ConfirmedFlush(pg, slot) >= target) return true;
  }
  return false;
}

std::string WaitForNewWalsender(const TestCluster& pg, Subprocess& relay,
                                std::string* walsender_pid, std::string_view slot) {
  for (int i = 0; i < 1000; ++i) {
    auto pid = pg.QueryScalar("SELECT active_pid FROM pg_replication_slots WHERE slot_name = " +
                              QuoteLiteral(slot) + " AND active");
    if (pid.ok() && !pid->empty() && *pid != *walsender_pid) {
      *walsender_pid = *pid;
      return "";
    }
    if (!relay.running()) return "the relay exited\n" + relay.LogTail();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "the relay did not start streaming within 20 s\n" + relay.LogTail();
}

}  // namespace walrelay::testing
