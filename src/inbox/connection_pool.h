// Internal to walrelay::inbox: a bounded pool of database connections shared by the
// partition workers, and an RAII lease of one. Thread-safe (Acquire/Release from any
// thread); a leased PGconn is used by one thread at a time. The pool owns idle
// connections and closes them in its destructor; a leased connection is the leaseholder's
// until Release (a connection that is broken or inside a transaction is closed then).
#pragma once

#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "slot/conninfo.h"

namespace walrelay::inbox {

// A bounded pool of database connections shared by the partition workers.
class ConnectionPool {
 public:
  // Connections made as pg::Connect(conninfo, statement_timeout) makes them, at most `max`.
  ConnectionPool(slot::ConnInfo conninfo, int max, std::chrono::milliseconds statement_timeout)
      : conninfo_(std::move(conninfo)), max_(max), statement_timeout_(statement_timeout) {}
  ~ConnectionPool() {
    for (PGconn* c : idle_) PQfinish(c);
  }

  // A connection, waiting while all are in use; kCancelled when `stop` turns true;
  // kUnavailable (or the connect failure's code) when a new connection fails.
  Result<PGconn*> Acquire(const std::atomic<bool>& stop);

  // Returns a leased connection.
  void Release(PGconn* c);

 private:
  const slot::ConnInfo conninfo_;
  const int max_;
  const std::chrono::milliseconds statement_timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<PGconn*> idle_;
  int open_ = 0;
};

// RAII lease of a pooled connection.
class Lease {
 public:
  Lease(ConnectionPool& pool, PGconn* c) : pool_(pool), c_(c) {}
  ~Lease() { pool_.Release(c_); }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  PGconn* get() const { return c_; }

 private:
  ConnectionPool& pool_;
  PGconn* c_;
};

}  // namespace walrelay::inbox
