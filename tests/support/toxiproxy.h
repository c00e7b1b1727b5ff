// Toxiproxy: Shopify's TCP fault proxy (scripts/toxiproxy.sh builds and starts it) for the
// network-fault tests (issue 45): a proxy between the relay or the inbox and PostgreSQL or
// a Kafka broker, and toxics on it that cut, slow or reset what crosses.
//
// One server per test program, started at the first Shared() call (the first run on a
// machine builds it from the Go module proxy, about a minute) and stopped when the program
// exits. Tests make proxies of their own (names unique in the program) and remove their
// toxics (RemoveAll) when they end.
//
// A black hole (BlackHole) is Toxiproxy's `timeout` toxic with timeout 0 on both
// directions: the proxy still accepts connections and keeps them open, and drops every
// byte (no RST, no FIN): what a firewall that forgot a flow, or a partition behind a load
// balancer, looks like to a client. Connections made during it hang the same way.
//
// Thread safety: one test thread.
#pragma once

#include <map>
#include <string>

#include "base/status.h"

namespace walrelay::testing {

class Toxiproxy {
 public:
  // The program's server; errors say what failed (go missing, the module proxy refused).
  static Result<Toxiproxy*> Shared();

  // A proxy named `name` listening on `listen_port` of 127.0.0.1 (0: a free port),
  // forwarding to `upstream` ("host:port"); one of that name made before is replaced.
  // Returns the port it listens on.
  Result<int> CreateProxy(const std::string& name, const std::string& upstream, int listen_port = 0);

  // A toxic on `proxy`: `type` (latency, bandwidth, timeout, reset_peer, slicer,
  // limit_data, slow_close), `stream` ("upstream": client to server, or "downstream"), and
  // its attributes as a JSON object's members ("\"latency\":200,\"jitter\":50").
  Status AddToxic(const std::string& proxy, const std::string& toxic, const std::string& type,
                  const std::string& stream, const std::string& attributes);
  Status RemoveToxic(const std::string& proxy, const std::string& toxic);
  // Both directions dropped, connections kept open (see above); Heal removes it.
  Status BlackHole(const std::string& proxy);
  Status Heal(const std::string& proxy);
  // Every toxic of every proxy removed, every proxy enabled (Toxiproxy's /reset).
  Status RemoveAll();
  // The names of the toxics on `proxy` now, as the server lists them (a test shows its
  // fault is in place before it judges).
  Result<std::string> Describe(const std::string& proxy);

 private:
  Toxiproxy() = default;
  Result<std::string> Request(const std::string& method, const std::string& path,
                              const std::string& body);
  std::string host_;
  int port_ = 0;
  std::string dir_;
};

}  // namespace walrelay::testing
