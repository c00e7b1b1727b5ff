// MetricsServer: an HTTP server (cpp-httplib) on its own thread serving
//   GET /metrics  the Registry in the text exposition format 0.0.4
//                 (Content-Type: text/plain; version=0.0.4; charset=utf-8)
//   GET /healthz  200 "ok" while the process serves requests (liveness)
//   GET /readyz   200 "ready" when the caller's predicate returns OK, else 503 with the
//                 predicate's message (readiness: e.g. streaming and under the critical
//                 slot threshold)
//   GET /readyz?standby=ready
//                 the same, except that a process standing by (the caller's `standing_by`
//                 says so) answers 200 "ready (standing by): <why>": for orchestrators that
//                 count a healthy standby as available (a Kubernetes readiness probe, which
//                 a PodDisruptionBudget and a rolling update read)
// Anything else is 404. Only GET (and HEAD) are answered: other methods get 405 before a
// body is read, and a request body is refused (413) instead of buffered.
//
// Lifetime: Start() binds (so a bad address fails there, synchronously) and starts the
// thread; Stop() (or the destructor) stops listening, waits for in-flight requests and
// joins. The Registry and the predicate must outlive the server.
// Thread safety: Start/Stop from one thread; port() from any. The predicate runs on the
// server's worker threads: it must be thread-safe (read atomics).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "base/status.h"
#include "src/metrics/registry.h"

namespace httplib {
class Server;
}

namespace walrelay::metrics {

struct ServerOptions {
  // "host:port", "[v6addr]:port" or ":port" (loopback, 127.0.0.1; all interfaces only
  // when asked: "0.0.0.0:port"). Port 0 picks a free port (see MetricsServer::port()).
  std::string address = "127.0.0.1:9187";
  // Readiness; OK = ready. Unset: always ready.
  std::function<Status()> ready;
  // Whether the process stands by (another one does the work and it takes over when that
  // one stops): /readyz?standby=ready then answers 200. Unset: never.
  std::function<bool()> standing_by;
  // A standing warning appended to every /readyz body ("note: ..."), ready or not, e.g.
  // that records live only in memory. Unset or empty: none.
  std::function<std::string()> note;
  // Worker threads for concurrent scrapes. A client that sends slowly holds one for up to
  // the read timeout (2 s): threads - 1 such clients cannot delay /healthz.
  int threads = 4;
};

class MetricsServer {
 public:
  // kInvalidArgument for an unparsable address; kUnavailable when the bind fails (port in
  // use, address not local).
  static Result<std::unique_ptr<MetricsServer>> Start(const Registry* registry,
                                                      ServerOptions options);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound port (useful with port 0).
  int port() const { return port_; }
  const std::string& host() const { return host_; }

  // Idempotent.
  void Stop();

 private:
  MetricsServer(const Registry* registry, ServerOptions options);

  const Registry* registry_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string host_;
  int port_ = 0;
};

// Splits "host:port" / "[v6]:port" / ":port" (host 127.0.0.1). kInvalidArgument on a bad
// form or port.
Result<std::pair<std::string, int>> ParseHostPort(std::string_view address);

}  // namespace walrelay::metrics
