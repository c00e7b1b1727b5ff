#include "src/cli/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace walrelay::cli {

std::unique_ptr<SystemdNotifier> SystemdNotifier::FromEnvironment() {
  const char* socket_name = std::getenv("NOTIFY_SOCKET");
  if (socket_name == nullptr || *socket_name == '\0') return nullptr;
  std::string address(socket_name);
  if (address[0] == '@') address[0] = '\0';  // abstract namespace
  if (address.size() >= sizeof(sockaddr_un::sun_path)) return nullptr;
  std::chrono::microseconds watchdog{0};
  const char* pid = std::getenv("WATCHDOG_PID");
  if (const char* usec = std::getenv("WATCHDOG_USEC");
      usec != nullptr && (pid == nullptr || std::atol(pid) == static_cast<long>(::getpid()))) {
    watchdog = std::chrono::microseconds(std::strtoll(usec, nullptr, 10));
  }
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  return std::unique_ptr<SystemdNotifier>(new SystemdNotifier(fd, std::move(address), watchdog));
}

SystemdNotifier::~SystemdNotifier() { ::close(fd_); }

bool SystemdNotifier::Send(std::string_view state) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, address_.data(), address_.size());
  const socklen_t len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address_.size() +
                             (address_[0] == '\0' ? 0 : 1));
  return ::sendto(fd_, state.data(), state.size(), MSG_NOSIGNAL,
                  reinterpret_cast<const sockaddr*>(&addr), len) ==
         static_cast<ssize_t>(state.size());
}

}  // namespace walrelay::cli
