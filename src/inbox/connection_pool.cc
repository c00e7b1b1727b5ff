#include "src/inbox/connection_pool.h"

#include <chrono>

#include "src/inbox/pg.h"

namespace walrelay::inbox {

using namespace std::chrono_literals;

Result<PGconn*> ConnectionPool::Acquire(const std::atomic<bool>& stop) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (stop.load()) return CancelledError("stopping");
    if (!idle_.empty()) {
      PGconn* c = idle_.back();
      idle_.pop_back();
      if (PQstatus(c) == CONNECTION_OK) return c;
      PQfinish(c);
      --open_;
    }
    if (open_ < max_) {
      ++open_;
      lock.unlock();
      Result<PGconn*> c = pg::Connect(conninfo_, statement_timeout_);
      if (!c.ok()) {
        lock.lock();
        --open_;
        cv_.notify_one();
      }
      return c;
    }
    cv_.wait_for(lock, 100ms);
  }
}

void ConnectionPool::Release(PGconn* c) {
  std::lock_guard lock(mu_);
  if (PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) == PQTRANS_IDLE) {
    idle_.push_back(c);
  } else {
    PQfinish(c);
    --open_;
  }
  cv_.notify_one();
}

}  // namespace walrelay::inbox
