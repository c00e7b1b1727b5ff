// TcpProxy: a TCP forwarder between a test and a server, which the test can freeze to
// simulate a half-open connection (the peer silent, no RST, no FIN).
//
// Start() listens on 127.0.0.1 (a free port) and forwards every accepted connection to
// 127.0.0.1:<target_port>, both directions, on one background thread. Freeze() stops
// forwarding on the connections open at that moment — their bytes stay in the sockets,
// nothing is closed — while connections accepted later are forwarded normally (a client
// that reconnects gets through). Thaw() resumes the frozen ones.
//
// Thread safety: Freeze/Thaw/connections from any thread. The destructor stops the thread
// and closes every socket.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"

namespace walrelay::testing {

class TcpProxy {
 public:
  static Result<std::unique_ptr<TcpProxy>> Start(int target_port);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }
  void Freeze();
  void Thaw();
  // Connections accepted so far.
  int connections() const { return accepted_.load(); }

 private:
  struct Pair {
    int client = -1;
    int server = -1;
    bool frozen = false;
  };
  TcpProxy() = default;
  void Loop();

  int listen_fd_ = -1;
  int port_ = 0;
  int target_port_ = 0;
  int wake_[2] = {-1, -1};  // self-pipe: wakes the loop after Freeze/Thaw/stop
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::mutex mu_;
  std::vector<Pair> pairs_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace walrelay::testing
