// systemd's service notification protocol (sd_notify(3)) without libsystemd: datagrams of
// "KEY=value" lines to the unix socket named by $NOTIFY_SOCKET (a path, or "@name" in the
// abstract namespace). `walrelay run` under Type=notify says READY=1 once it streams (or
// stands by), keeps STATUS= current, pets the watchdog (WATCHDOG=1 every WATCHDOG_USEC / 2)
// only while the relay's loops advance, and says STOPPING=1 on the way out. Without
// $NOTIFY_SOCKET nothing is sent.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

namespace walrelay::cli {

class SystemdNotifier {
 public:
  // Null when $NOTIFY_SOCKET is unset or empty.
  static std::unique_ptr<SystemdNotifier> FromEnvironment();
  ~SystemdNotifier();
  SystemdNotifier(const SystemdNotifier&) = delete;
  SystemdNotifier& operator=(const SystemdNotifier&) = delete;

  // Sends one datagram (newline-separated assignments); false when it could not be sent.
  bool Send(std::string_view state);
  // $WATCHDOG_USEC (when $WATCHDOG_PID is unset or this process), else zero.
  std::chrono::microseconds watchdog_interval() const { return watchdog_; }

 private:
  SystemdNotifier(int fd, std::string address, std::chrono::microseconds watchdog)
      : fd_(fd), address_(std::move(address)), watchdog_(watchdog) {}
  int fd_;
  std::string address_;  // sun_path bytes ("\0name" for an abstract socket)
  std::chrono::microseconds watchdog_;
};

}  // namespace walrelay::cli
